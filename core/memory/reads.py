"""Read side of the store managers' pages: plain SQL, returned as DataFrames.

The dashboard reads `store` with SQL rather than `store.search`, on purpose: a search
refreshes TTLs (`refresh_on_read`), and looking at memory must never extend its retention.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import psycopg
from psycopg.rows import DictRow

from core.db import Database, one
from core.ids import NamespaceSearch
from core.memory import customer_stores
from core.memory.customer_stores import MINE, MINE_PREFIXES, MINE_PREFIXES_LARGE, PREFIX_IN_SCOPE, ROOT, Scope
from core.memory.store import MAX_DOCS_PER_CUSTOMER, ROOTS

# Totals per root come from `core_root_counts`, documents per namespace from `core_prefix_counts`, the expired
# documents of the days before today from `core_expiry_days`: the change follower keeps all three in the dashboard's
# own database (`db.ours`, core/sql/dashboard/001). Today's slice of expired documents is counted live in the agents'
# `store` on its expires_at index; never a scan of every expired row (1.95M of them took 0.3-0.5 s at 10M documents,
# BENCHMARKS.md). Two queries, never a join across the two databases (issue 52): the agents' clock says which day
# "today" is, ours counts the days before it. The exporter and the Sweeps page use it too.
SELECT_EXPIRED_TODAY = """
WITH b AS (SELECT now() AS now, (now() AT TIME ZONE 'UTC')::date AS today)
SELECT b.today, coalesce((
    SELECT jsonb_object_agg(root, n) FROM (
        SELECT split_part(s.prefix, '.', 1) AS root, count(*) AS n FROM store s
        WHERE s.expires_at >= b.today::timestamp AT TIME ZONE 'UTC' AND s.expires_at < b.now GROUP BY 1) x
), '{}'::jsonb) AS by_root
FROM b"""
SELECT_EXPIRED_DAYS = """
SELECT root, sum(documents)::bigint AS expired FROM core_expiry_days WHERE day < %(today)s GROUP BY root"""

SELECT_ROOT_TOTALS = """
SELECT coalesce(sum(documents), 0)::bigint AS documents, coalesce(sum(vectors), 0)::bigint AS vectors,
       coalesce(sum(namespaces), 0)::bigint AS namespaces,
       coalesce(sum(namespaces) FILTER (WHERE root = 'clientes'), 0)::bigint AS customers
FROM core_root_counts"""

SELECT_BY_ROOT = """
SELECT root, sum(documents)::bigint AS documents, sum(namespaces)::bigint AS namespaces
FROM core_root_counts GROUP BY root HAVING sum(namespaces) > 0 ORDER BY 2 DESC, 1"""

SELECT_TOP_PREFIXES = """
SELECT prefix, root, documents, last_write FROM core_prefix_counts ORDER BY documents DESC, prefix LIMIT %s"""
SELECT_EXPIRED_OF = """
SELECT prefix, count(*) AS expired FROM store WHERE prefix = ANY(%s) AND expires_at < now() GROUP BY prefix"""

SELECT_OVERSIZED = """
SELECT split_part(prefix, '.', 2) AS cliente_id, prefix, documents, last_write FROM core_prefix_counts
WHERE root = 'clientes' AND documents > %s ORDER BY documents DESC, prefix LIMIT %s"""
SELECT_KEYS_OF = """
SELECT prefix, string_agg(key, ', ' ORDER BY key) AS keys FROM store WHERE prefix = ANY(%s) GROUP BY prefix"""


def _expired(live: DictRow, days: list[DictRow]) -> dict[str, int]:
    found = {root: int(n) for root, n in live["by_root"].items()}
    for r in days:
        found[r["root"]] = found.get(r["root"], 0) + int(r["expired"])
    return {root: n for root, n in found.items() if n}


def expired_counts_conns(agents: psycopg.Connection[DictRow], ours: psycopg.Connection[DictRow]) -> dict[str, int]:
    """Documents expired now and not yet swept, per root (roots with none left out): the days before the agents'
    today from ours, today's slice live from theirs."""
    live = one(agents.execute(SELECT_EXPIRED_TODAY).fetchone())
    return _expired(live, ours.execute(SELECT_EXPIRED_DAYS, {"today": live["today"]}).fetchall())


def expired_counts(db: Database) -> dict[str, int]:
    """expired_counts_conns through the dashboard's pools (one connection at a time)."""
    live = one(db.fetch_one(SELECT_EXPIRED_TODAY))
    return _expired(live, db.ours.fetch(SELECT_EXPIRED_DAYS, {"today": live["today"]}))


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
        kept = one(db.ours.fetch_one(SELECT_ROOT_TOTALS))
        return MemoryTotals(**kept, expired=sum(expired_counts(db).values()))
    return MemoryTotals(**one(db.fetch_one(scoped_sql(db, "totals", scope), scope.params())))


def documents_by_root(db: Database, scope: Scope | None = None) -> pd.DataFrame:
    columns = ["root", "documents", "namespaces", "expired"]
    if scope is not None:
        return pd.DataFrame(db.fetch(scoped_sql(db, "by_root", scope), scope.params()), columns=columns)
    rows = db.ours.fetch(SELECT_BY_ROOT)
    expired = expired_counts(db)
    return pd.DataFrame([{**r, "expired": expired.get(r["root"], 0)} for r in rows], columns=columns)


def top_prefixes(db: Database, limit: int = 20, scope: Scope | None = None) -> pd.DataFrame:
    columns = ["prefix", "root", "documents", "expired", "last_write"]
    if scope is not None:
        return pd.DataFrame(db.fetch(scoped_sql(db, "top", scope), {**scope.params(), "limit": limit}), columns=columns)
    rows = db.ours.fetch(SELECT_TOP_PREFIXES, (limit,))
    expired = {r["prefix"]: r["expired"] for r in db.fetch(SELECT_EXPIRED_OF, ([r["prefix"] for r in rows],))}
    return pd.DataFrame([{**r, "expired": expired.get(r["prefix"], 0)} for r in rows], columns=columns)


def oversized_customers(db: Database, limit: int = 200, scope: Scope | None = None) -> pd.DataFrame:
    """Customers whose namespace holds more documents than the closed schema allows."""
    if scope is None:
        rows = db.ours.fetch(SELECT_OVERSIZED, (MAX_DOCS_PER_CUSTOMER, limit))
        keys = {r["prefix"]: r["keys"] for r in db.fetch(SELECT_KEYS_OF, ([r["prefix"] for r in rows],))}
        rows = [{**r, "keys": keys.get(r["prefix"])} for r in rows]
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
    rows = db.ours.fetch(SELECT_NAMESPACE_SUGGESTIONS, {"candidates": candidates, "starts": starts, "limit": limit})
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
