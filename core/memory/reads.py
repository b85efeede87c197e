"""Read side of the store managers' pages: plain SQL, returned as DataFrames.

The dashboard reads `store` with SQL rather than `store.search`, on purpose: a search
refreshes TTLs (`refresh_on_read`), and looking at memory must never extend its retention.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from core.db import Database, one
from core.ids import NamespaceSearch
from core.memory import customer_stores
from core.memory.customer_stores import MINE, MINE_PREFIXES, MINE_PREFIXES_LARGE, PREFIX_IN_SCOPE, ROOT, Scope
from core.memory.store import MAX_DOCS_PER_CUSTOMER, ROOTS

# Totals per root come from `core_root_counts` (core/sql/046_root_counts.sql), documents per namespace from
# `core_prefix_counts` (007), both kept exact by triggers. Expired documents: the days before today from
# `core_expiry_days` (040), today's slice counted live on the expires_at index; never a scan of every expired
# row (1.95M of them took 0.3-0.5 s at 10M documents, BENCHMARKS.md). The exporter and the Sweeps page use it too.
SELECT_EXPIRED_BY_ROOT = """
WITH b AS (SELECT now() AS now, (now() AT TIME ZONE 'UTC')::date AS today)
SELECT root, sum(expired)::bigint AS expired FROM (
    SELECT d.root, d.documents AS expired FROM core_expiry_days d, b WHERE d.day < b.today
    UNION ALL
    SELECT split_part(s.prefix, '.', 1), count(*) FROM store s, b
    WHERE s.expires_at >= b.today::timestamp AT TIME ZONE 'UTC' AND s.expires_at < b.now GROUP BY 1
) x GROUP BY root HAVING sum(expired) <> 0"""

SELECT_TOTALS = f"""
WITH r AS (SELECT sum(documents) AS documents, sum(namespaces) AS namespaces, sum(vectors) AS vectors
           FROM core_root_counts)
SELECT coalesce(r.documents, 0)::bigint AS documents,
       (SELECT coalesce(sum(expired), 0)::bigint FROM ({SELECT_EXPIRED_BY_ROOT}) e) AS expired,
       coalesce(r.vectors, 0)::bigint AS vectors, coalesce(r.namespaces, 0)::bigint AS namespaces,
       (SELECT coalesce(sum(namespaces), 0)::bigint FROM core_root_counts WHERE root = 'clientes') AS customers
FROM r"""

SELECT_BY_ROOT = f"""
WITH docs AS (
    SELECT root, sum(documents)::bigint AS documents, sum(namespaces)::bigint AS namespaces
    FROM core_root_counts GROUP BY root HAVING sum(namespaces) > 0
)
SELECT d.root, d.documents, d.namespaces, coalesce(e.expired, 0) AS expired
FROM docs d LEFT JOIN ({SELECT_EXPIRED_BY_ROOT}) e USING (root) ORDER BY d.documents DESC, d.root"""

SELECT_TOP_PREFIXES = """
SELECT c.prefix, c.root, c.documents,
       (SELECT count(*) FROM store s WHERE s.prefix = c.prefix AND s.expires_at < now()) AS expired,
       c.last_write
FROM core_prefix_counts c ORDER BY c.documents DESC, c.prefix LIMIT %s"""

SELECT_OVERSIZED = """
SELECT split_part(c.prefix, '.', 2) AS cliente_id, c.prefix, c.documents,
       (SELECT string_agg(s.key, ', ' ORDER BY s.key) FROM store s WHERE s.prefix = c.prefix) AS keys,
       c.last_write
FROM core_prefix_counts c
WHERE c.root = 'clientes' AND c.documents > %s ORDER BY c.documents DESC, c.prefix LIMIT %s"""

# Exact matches only: `=` never interprets `%` or `_`.
SELECT_NAMESPACE_EXACT = """
SELECT prefix, count(*) AS documents FROM store
WHERE prefix = ANY(%s) GROUP BY prefix ORDER BY prefix"""

# The search's suggestions: namespaces whose name starts with each candidate (the text typed as a full name, or as an
# id under each root), in name order. A range scan of core_prefix_counts' primary key per candidate: exact in
# code-point collations (C, C.UTF-8: the embedded server's, and CloudNativePG's default); the LIKE keeps out any
# name a linguistic collation would sort into the range. 100k documents, no match: 0.6 ms (a scan of every
# namespace took 18 ms), bench/bench_pages.py.
SELECT_NAMESPACE_SUGGESTIONS = r"""
SELECT c.prefix, c.documents
FROM unnest(%(candidates)s::text[], %(starts)s::text[]) AS q(low, start)
CROSS JOIN LATERAL (
    SELECT prefix, documents FROM core_prefix_counts
    WHERE prefix >= q.low AND prefix < q.low || chr(1114111) AND prefix LIKE q.start ESCAPE '\' AND documents > 0
    ORDER BY prefix LIMIT %(limit)s) c
ORDER BY c.prefix LIMIT %(limit)s"""

# The page first (LIMIT/OFFSET on the primary key), then one vector lookup per row shown. A document reads as
# its tipo and valor (a preference, `pref-{tipo}`), else its `texto`, else its JSON; the conversation that wrote it
# is its `hilo` back-link (the memory article's tool writes one), else the last write our agents logged.
SELECT_NAMESPACE_ITEMS = """
SELECT s.key,
       coalesce(s.value ->> 'tipo', CASE WHEN s.key LIKE 'pref-%%' THEN substr(s.key, 6) END) AS tipo,
       coalesce(s.value ->> 'valor', s.value ->> 'texto', s.value::text) AS valor,
       s.expires_at, round(s.ttl_minutes / 1440.0, 1)::float8 AS ttl_days,
       coalesce(s.value ->> 'hilo',
                (SELECT w.thread_id FROM core_memory_writes w WHERE w.prefix = s.prefix AND w.key = s.key
                 AND w.thread_id IS NOT NULL ORDER BY w.written_at DESC, w.id DESC LIMIT 1)) AS thread_id,
       s.created_at, s.updated_at,
       (s.expires_at IS NOT NULL AND s.expires_at < now()) AS expired,
       EXISTS (SELECT 1 FROM store_vectors v WHERE v.prefix = s.prefix AND v.key = s.key) AS vector
FROM (SELECT * FROM store WHERE prefix = %s ORDER BY key LIMIT %s OFFSET %s) s
ORDER BY s.key"""
ITEM_COLUMNS = [
    "key",
    "tipo",
    "valor",
    "expires_at",
    "ttl_days",
    "thread_id",
    "created_at",
    "updated_at",
    "expired",
    "vector",
]


# --- a store manager's reads (issue 39): only the customers of their stores (core.memory.customer_stores.MINE), in
# SQL. Each reads the scope's namespaces from core_prefix_counts, and the agents' tables only by their own primary
# keys (store (prefix, key), store_vectors (prefix, key, field_name)) per namespace of the scope, or, for a large scope
# (customer_stores.LARGE_SCOPE), by hashed joins whose time does not grow with the scope.
EXPIRED_OF = "(SELECT count(*) FROM store s WHERE s.prefix = p.prefix AND s.expires_at < now())"
VECTORS_OF = "(SELECT count(*) FROM store_vectors v WHERE v.prefix = p.prefix)"
EXPIRED_LARGE = "(SELECT count(*) FROM store s WHERE s.expires_at < now() AND s.prefix IN (SELECT prefix FROM p))"
VECTORS_LARGE = "(SELECT count(*) FROM store_vectors v WHERE v.prefix IN (SELECT prefix FROM p))"
TOTALS = """
SELECT coalesce(sum(p.documents), 0)::bigint AS documents, {expired} AS expired, {vectors} AS vectors,
       count(*) AS namespaces, count(DISTINCT p.cliente_id) AS customers
FROM mine_prefixes p"""
BY_ROOT = f"""
SELECT '{ROOT}' AS root, sum(p.documents)::bigint AS documents, count(*) AS namespaces, {{expired}} AS expired
FROM mine_prefixes p HAVING count(*) > 0"""
SELECT_SCOPED_TOP_PREFIXES = f"""
SELECT p.prefix, '{ROOT}' AS root, p.documents, {EXPIRED_OF} AS expired, p.last_write
FROM (SELECT * FROM mine_prefixes ORDER BY documents DESC, prefix LIMIT %(limit)s) p
ORDER BY p.documents DESC, p.prefix"""
SELECT_SCOPED_OVERSIZED = """
SELECT split_part(p.prefix, '.', 2) AS cliente_id, p.prefix, p.documents,
       (SELECT string_agg(s.key, ', ' ORDER BY s.key) FROM store s WHERE s.prefix = p.prefix) AS keys, p.last_write
FROM mine_prefixes p WHERE p.documents > %(max)s ORDER BY p.documents DESC, p.prefix LIMIT %(limit)s"""
SCOPED_SQL = {  # read -> (the statement for a scope, the statement for a large scope)
    "totals": (
        "WITH "
        + MINE_PREFIXES
        + TOTALS.format(
            expired=f"coalesce(sum({EXPIRED_OF}), 0)::bigint", vectors=f"coalesce(sum({VECTORS_OF}), 0)::bigint"
        ),
        "WITH "
        + MINE_PREFIXES_LARGE
        + ", p AS (SELECT * FROM mine_prefixes)"
        + TOTALS.replace("FROM mine_prefixes p", "FROM p").format(expired=EXPIRED_LARGE, vectors=VECTORS_LARGE),
    ),
    "by_root": (
        "WITH " + MINE_PREFIXES + BY_ROOT.format(expired=f"coalesce(sum({EXPIRED_OF}), 0)::bigint"),
        "WITH "
        + MINE_PREFIXES_LARGE
        + ", p AS (SELECT * FROM mine_prefixes)"
        + BY_ROOT.replace("FROM mine_prefixes p", "FROM p").format(expired=EXPIRED_LARGE),
    ),
    "top": (
        "WITH " + MINE_PREFIXES + SELECT_SCOPED_TOP_PREFIXES,
        "WITH " + MINE_PREFIXES_LARGE + SELECT_SCOPED_TOP_PREFIXES,
    ),
    "oversized": (
        "WITH " + MINE_PREFIXES + SELECT_SCOPED_OVERSIZED,
        "WITH " + MINE_PREFIXES_LARGE + SELECT_SCOPED_OVERSIZED,
    ),
}


def scoped_sql(db: Database, read: str, scope: Scope) -> str:
    """The statement of a scoped read for this scope's size."""
    small, large = SCOPED_SQL[read]
    return large if customer_stores.large_scope(db, scope) else small


SELECT_SCOPED_NAMESPACE_EXACT = f"""
SELECT prefix, count(*) AS documents FROM store
WHERE prefix = ANY(%(candidates)s) AND split_part(prefix, '.', 1) = '{ROOT}' AND split_part(prefix, '.', 2) IN ({MINE})
GROUP BY prefix ORDER BY prefix"""
# Suggestions: the scope's customers whose id starts with the text typed (a range scan of the mapping's
# (tienda, cliente_id) index per store), with documents.
SELECT_SCOPED_SUGGESTIONS = f"""
SELECT c.prefix, c.documents
FROM ({MINE} AND m.cliente_id >= %(low)s AND m.cliente_id < %(low)s || chr(1114111)
      AND left(m.cliente_id, length(%(low)s)) = %(low)s) mine
JOIN core_prefix_counts c ON c.prefix = '{ROOT}.' || mine.cliente_id AND c.documents > 0
ORDER BY c.prefix LIMIT %(limit)s"""
SELECT_SCOPED_NAMESPACE_ITEMS = SELECT_NAMESPACE_ITEMS.replace(
    "FROM (SELECT * FROM store WHERE prefix = %s ORDER BY key LIMIT %s OFFSET %s) s",
    "FROM (SELECT * FROM store WHERE prefix = %(prefix)s AND "
    + PREFIX_IN_SCOPE.strip()
    + " ORDER BY key LIMIT %(limit)s OFFSET %(offset)s) s",
)
assert SELECT_SCOPED_NAMESPACE_ITEMS != SELECT_NAMESPACE_ITEMS, "the scoped items query must add the scope"


@dataclass(frozen=True)
class MemoryTotals:
    documents: int
    expired: int
    vectors: int
    namespaces: int
    customers: int  # namespaces under `clientes` (its documents are the customer's preferences)


def memory_totals(db: Database, scope: Scope | None = None) -> MemoryTotals:
    """The Memory page's totals: of every holder, or (`scope`) of the customers of a manager's stores."""
    if scope is None:
        return MemoryTotals(**one(db.fetch_one(SELECT_TOTALS)))
    return MemoryTotals(**one(db.fetch_one(scoped_sql(db, "totals", scope), scope.params())))


def documents_by_root(db: Database, scope: Scope | None = None) -> pd.DataFrame:
    rows = db.fetch(SELECT_BY_ROOT) if scope is None else db.fetch(scoped_sql(db, "by_root", scope), scope.params())
    return pd.DataFrame(rows, columns=["root", "documents", "namespaces", "expired"])


def top_prefixes(db: Database, limit: int = 20, scope: Scope | None = None) -> pd.DataFrame:
    if scope is None:
        rows = db.fetch(SELECT_TOP_PREFIXES, (limit,))
    else:
        rows = db.fetch(scoped_sql(db, "top", scope), {**scope.params(), "limit": limit})
    return pd.DataFrame(rows, columns=["prefix", "root", "documents", "expired", "last_write"])


def oversized_customers(db: Database, limit: int = 200, scope: Scope | None = None) -> pd.DataFrame:
    """Customers whose namespace holds more documents than the closed schema allows."""
    if scope is None:
        rows = db.fetch(SELECT_OVERSIZED, (MAX_DOCS_PER_CUSTOMER, limit))
    else:
        params = {**scope.params(), "max": MAX_DOCS_PER_CUSTOMER, "limit": limit}
        rows = db.fetch(scoped_sql(db, "oversized", scope), params)
    return pd.DataFrame(rows, columns=["cliente_id", "prefix", "documents", "keys", "last_write"])


def _candidates(text: str) -> list[str]:
    """The namespaces `text` may name: itself when it holds a dot, else the id under each root."""
    return [text] if "." in text else [f"{root}.{text}" for root in ROOTS]


def find_namespaces(db: Database, text: str, scope: Scope | None = None) -> pd.DataFrame:
    """Namespaces matching `text` exactly: a full prefix (`clientes.C9`) or an id under any root (`C9`); with a
    `scope`, only those of the scope's customers.

    Raises InvalidIdentifier for empty, NUL-bearing or oversized input. `%`, `_` and quotes
    are literal characters here.
    """
    candidates = _candidates(NamespaceSearch.parse(text))
    if scope is not None:
        rows = db.fetch(SELECT_SCOPED_NAMESPACE_EXACT, {**scope.params(), "candidates": candidates})
        return pd.DataFrame(rows, columns=["prefix", "documents"])
    return pd.DataFrame(db.fetch(SELECT_NAMESPACE_EXACT, (candidates,)), columns=["prefix", "documents"])


def refused_customer(text: str) -> str | None:
    """The customer id a search names (`C9`, `clientes.C9`, `clientes.C9.x`), None when it names no customer."""
    text = NamespaceSearch.parse(text)
    if "." not in text:
        return text
    root, _, rest = text.partition(".")
    if root != ROOT:
        return None
    return rest.split(".")[0] or None


def suggest_namespaces(db: Database, text: str, limit: int = 10, scope: Scope | None = None) -> pd.DataFrame:
    """Up to `limit` namespaces whose full name, or id under a root, starts with `text` (`%`, `_`, `\\` literal),
    in name order; with a `scope`, only the scope's customers (`text` an id, or `clientes.` and the start of one)."""
    text = NamespaceSearch.parse(text)
    if scope is not None:
        low = text if "." not in text else text.removeprefix(f"{ROOT}.") if text.startswith(f"{ROOT}.") else None
        if not low or "." in low:
            return pd.DataFrame(columns=["prefix", "documents"])
        rows = db.fetch(SELECT_SCOPED_SUGGESTIONS, {**scope.params(), "low": low, "limit": limit})
        return pd.DataFrame(rows, columns=["prefix", "documents"])
    candidates = _candidates(text)
    starts = [c.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for c in candidates]
    rows = db.fetch(SELECT_NAMESPACE_SUGGESTIONS, {"candidates": candidates, "starts": starts, "limit": limit})
    return pd.DataFrame(rows, columns=["prefix", "documents"])


def namespace_items(
    db: Database, prefix: str, limit: int = 100, offset: int = 0, scope: Scope | None = None
) -> pd.DataFrame:
    """The items of one namespace (exact prefix) as a person reads them, without refreshing their TTL; with a `scope`,
    nothing unless the namespace is one of the scope's customers'."""
    if scope is None:
        return pd.DataFrame(db.fetch(SELECT_NAMESPACE_ITEMS, (prefix, limit, offset)), columns=ITEM_COLUMNS)
    params = {**scope.params(), "prefix": prefix, "limit": limit, "offset": offset}
    return pd.DataFrame(db.fetch(SELECT_SCOPED_NAMESPACE_ITEMS, params), columns=ITEM_COLUMNS)
