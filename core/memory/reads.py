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
from core.memory.customer_stores import MINE, MINE_PREFIXES, MINE_PREFIXES_LARGE, ROOT, Scope
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


# --- a store manager's reads (issue 39): only the customers of their stores (core.memory.customer_stores.MINE). Each
# is up to three queries, never a join across databases (issue 52): the scope's customers where the mapping is kept
# (`customer_stores.scope_customer_ids`), their namespaces in core_prefix_counts (ours), then the agents' tables only
# for those namespaces, passed as an array (store (prefix, key) and store_vectors (prefix, key, field_name) by their
# primary keys). Per-customer lookups of the namespaces for a scope, one hashed join for a large scope
# (customer_stores.LARGE_SCOPE), whose time does not grow with the scope.
MINE_IDS = "mine AS MATERIALIZED (SELECT DISTINCT unnest(%(ids)s::text[]) AS cliente_id)"
SELECT_SCOPE_PREFIXES = tuple(
    "WITH "
    + cte.replace(f"mine AS MATERIALIZED ({MINE})", MINE_IDS)
    + " SELECT prefix, documents, last_write, cliente_id FROM mine_prefixes ORDER BY documents DESC, prefix"
    for cte in (MINE_PREFIXES, MINE_PREFIXES_LARGE)
)
assert all(MINE_IDS in q for q in SELECT_SCOPE_PREFIXES), "the scope's customers must come as an array"
SELECT_EXPIRED_AND_VECTORS = """
SELECT (SELECT count(*) FROM store WHERE prefix = ANY(%(prefixes)s) AND expires_at < now()) AS expired,
       (SELECT count(*) FROM store_vectors WHERE prefix = ANY(%(prefixes)s)) AS vectors"""
SELECT_IN_SCOPE = f"SELECT cliente_id FROM ({MINE}) m WHERE cliente_id = ANY(%(ids)s)"
# Suggestions: the scope's customers whose id starts with the text typed (a range scan of the mapping's
# (tienda, cliente_id) index per store), a page at a time, then those of them with documents.
SELECT_SCOPED_IDS_FROM = f"""
SELECT cliente_id FROM ({MINE}) m
WHERE cliente_id > %(after)s AND cliente_id < %(low)s || chr(1114111) AND left(cliente_id, length(%(low)s)) = %(low)s
ORDER BY cliente_id LIMIT %(page)s"""
SELECT_NAMESPACES_WITH_DOCUMENTS = """
SELECT prefix, documents FROM core_prefix_counts WHERE prefix = ANY(%s) AND documents > 0 ORDER BY prefix LIMIT %s"""


def scope_prefixes(db: Database, scope: Scope) -> list[DictRow]:
    """The namespaces of the scope's customers that hold documents (`clientes.<id>` and those under it), most
    documents first: prefix, documents, last_write, cliente_id."""
    ids = customer_stores.scope_customer_ids(db, scope)
    if not ids:
        return []
    small, large = SELECT_SCOPE_PREFIXES
    return db.ours.fetch(large if len(ids) > customer_stores.LARGE_SCOPE else small, {"ids": ids})


def customers_in_scope(db: Database, scope: Scope, ids: list[str]) -> set[str]:
    """Those of `ids` that are customers of the scope's stores."""
    return {r["cliente_id"] for r in db.ours.fetch(SELECT_IN_SCOPE, {**scope.params(), "ids": ids})} if ids else set()


def _expired_of(db: Database, prefixes: list[str]) -> dict[str, int]:
    return {r["prefix"]: r["expired"] for r in db.fetch(SELECT_EXPIRED_OF, (prefixes,))} if prefixes else {}


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
    mine = scope_prefixes(db, scope)
    prefixes = [r["prefix"] for r in mine]
    live = one(db.fetch_one(SELECT_EXPIRED_AND_VECTORS, {"prefixes": prefixes}))
    return MemoryTotals(
        documents=sum(r["documents"] for r in mine),
        expired=live["expired"],
        vectors=live["vectors"],
        namespaces=len(mine),
        customers=len({r["cliente_id"] for r in mine}),
    )


def documents_by_root(db: Database, scope: Scope | None = None) -> pd.DataFrame:
    columns = ["root", "documents", "namespaces", "expired"]
    if scope is not None:
        mine = scope_prefixes(db, scope)
        if not mine:
            return pd.DataFrame(columns=columns)
        live = one(db.fetch_one(SELECT_EXPIRED_AND_VECTORS, {"prefixes": [r["prefix"] for r in mine]}))
        row = {"root": ROOT, "documents": sum(r["documents"] for r in mine), "namespaces": len(mine)}
        return pd.DataFrame([{**row, "expired": live["expired"]}], columns=columns)
    rows = db.ours.fetch(SELECT_BY_ROOT)
    expired = expired_counts(db)
    return pd.DataFrame([{**r, "expired": expired.get(r["root"], 0)} for r in rows], columns=columns)


def top_prefixes(db: Database, limit: int = 20, scope: Scope | None = None) -> pd.DataFrame:
    columns = ["prefix", "root", "documents", "expired", "last_write"]
    if scope is None:
        rows = db.ours.fetch(SELECT_TOP_PREFIXES, (limit,))
    else:
        rows = [{**r, "root": ROOT} for r in scope_prefixes(db, scope)[:limit]]
    expired = _expired_of(db, [r["prefix"] for r in rows])
    return pd.DataFrame([{**r, "expired": expired.get(r["prefix"], 0)} for r in rows], columns=columns)


def oversized_customers(db: Database, limit: int = 200, scope: Scope | None = None) -> pd.DataFrame:
    """Customers whose namespace holds more documents than the closed schema allows."""
    if scope is None:
        rows = db.ours.fetch(SELECT_OVERSIZED, (MAX_DOCS_PER_CUSTOMER, limit))
    else:
        rows = [r for r in scope_prefixes(db, scope) if r["documents"] > MAX_DOCS_PER_CUSTOMER][:limit]
        rows = [{**r, "cliente_id": r["prefix"].split(".")[1]} for r in rows]
    keys = {r["prefix"]: r["keys"] for r in db.fetch(SELECT_KEYS_OF, ([r["prefix"] for r in rows],))} if rows else {}
    rows = [{**r, "keys": keys.get(r["prefix"])} for r in rows]
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
        ids = [c.split(".")[1] for c in candidates if c.split(".")[0] == ROOT and c.count(".") >= 1]
        mine = customers_in_scope(db, scope, ids)
        candidates = [c for c in candidates if c.split(".")[0] == ROOT and c.split(".")[1] in mine]
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
        return pd.DataFrame(_scoped_suggestions(db, scope, low, limit), columns=["prefix", "documents"])
    candidates = _candidates(text)
    starts = [c.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for c in candidates]
    rows = db.ours.fetch(SELECT_NAMESPACE_SUGGESTIONS, {"candidates": candidates, "starts": starts, "limit": limit})
    return pd.DataFrame(rows, columns=["prefix", "documents"])


def _scoped_suggestions(db: Database, scope: Scope, low: str, limit: int) -> list[DictRow]:
    """The scope's customers whose id starts with `low` and whose namespace holds documents, `limit` in id order: a
    page of the scope's matching ids at a time from the mapping, those with documents among them from ours."""
    found: list[DictRow] = []
    after = ""
    while len(found) < limit:
        page = [
            r["cliente_id"]
            for r in db.ours.fetch(  # the mapping is kept in the dashboard's database (issue 52)
                SELECT_SCOPED_IDS_FROM, {**scope.params(), "low": low, "after": after, "page": limit * 4}
            )
        ]
        if not page:
            break
        found += db.ours.fetch(SELECT_NAMESPACES_WITH_DOCUMENTS, ([f"{ROOT}.{i}" for i in page], limit - len(found)))
        after = page[-1]
    return found


def namespace_items(
    db: Database, prefix: str, limit: int = 100, offset: int = 0, scope: Scope | None = None
) -> pd.DataFrame:
    """The items of one namespace (exact prefix) as a person reads them, without refreshing their TTL; with a `scope`,
    nothing unless the namespace is one of the scope's customers'."""
    if scope is None:
        return pd.DataFrame(db.fetch(SELECT_NAMESPACE_ITEMS, (prefix, limit, offset)), columns=ITEM_COLUMNS)
    root, _, rest = prefix.partition(".")
    if root != ROOT or not customers_in_scope(db, scope, [rest.split(".")[0]]):
        return pd.DataFrame(columns=ITEM_COLUMNS)
    return pd.DataFrame(db.fetch(SELECT_NAMESPACE_ITEMS, (prefix, limit, offset)), columns=ITEM_COLUMNS)
