"""Which store(s) each customer belongs to, and the customers a store manager may see (issue 39).

Sources, in this order (`core_customer_stores.rank`), each named wherever it is used:
1. `query`: CUSTOMER_STORE_QUERY, a SQL query on the application's own tables returning `cliente_id, tienda` for
   every customer (no parameters), run as SUBJECT_THREAD_QUERY is (core.privacy.subjects): in a READ ONLY transaction
   under a statement timeout, an error kept as that source's error, never hidden;
2. `metadata:<key>`: the store key (CUSTOMER_STORE_KEYS, default `tienda`) in the checkpoint metadata of the
   customer's threads: the customer named by the same checkpoint's metadata (SUBJECT_METADATA_KEYS), else by the
   `hilo` back-link of the customer's preference documents or by our conversation log;
3. `document:<key>`: the same key in the customer's own documents (`clientes.<id>`).
A string or a list of strings is read at each key: a customer named in several stores belongs to each. The first
source that names any store for a customer gives that customer's stores (`effective`); later sources only fill in
customers the earlier ones do not know. A customer no source names is visible to no scoped manager and counted.

The mapping is our own table, refreshed by the sweep job and on demand (`refresh`), never by triggers on the agents'
tables. A change follower can keep a source current between sweeps with `replace_source(..., customers=...)` and
`recompute_effective(..., customers)` for the customers it saw change.

Every manager-facing read joins `MINE` (the customers of a `Scope`) in SQL. `MINE` is empty, so a scoped manager sees
nothing, while the mapping was never computed, while any source is in error, or when the sources it was computed from
are not the ones configured now.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import psycopg
from psycopg import sql as pgsql
from psycopg.rows import DictRow

from core.config import Settings, load_settings
from core.db import Database, one
from core.privacy.subjects import METADATA_KEY_SHAPE, QUERY_TIMEOUT_MS

ROOT = "clientes"
QUERY_SOURCE = "query"
METADATA_PREFIX, DOCUMENT_PREFIX = "metadata:", "document:"
REFRESH_LOCK = "SELECT pg_advisory_xact_lock(hashtext('core_customer_stores'))"
TRIGGERS = ("sweep", "manual", "demo")


class StoreSourceConfigError(ValueError):
    """CUSTOMER_STORE_KEYS or CUSTOMER_STORE_QUERY is unusable as configured (says which and why)."""


class Scope(NamedTuple):
    """What a scoped manager's reads are limited to: their `stores`, and the `sources` the mapping must have been
    computed from (the configured ones, sorted): a read joins MINE with both as parameters."""

    stores: tuple[str, ...]
    sources: tuple[str, ...]

    def params(self) -> dict[str, Any]:
        return {"stores": list(self.stores), "sources": sorted(self.sources)}


# The customers of a scope, as a subquery (`IN (MINE)`, or a CTE). Uncorrelated: the check of the sources is one
# InitPlan per statement; the customers come from the partial index on (tienda, cliente_id).
MINE = """
SELECT DISTINCT m.cliente_id FROM core_customer_stores m
WHERE m.effective AND m.tienda = ANY(%(stores)s::text[])
  AND (SELECT bool_and(s.error IS NULL) AND array_agg(s.source ORDER BY s.source COLLATE "C") = %(sources)s::text[]
       FROM core_customer_store_sources s)"""
# The namespaces of the scope's customers in core_prefix_counts (our documents-per-namespace table): `clientes.<id>`
# and namespaces nested under it (`clientes.<id>.x`), each by the primary key.
MINE_PREFIXES = f"""
mine AS MATERIALIZED ({MINE}),
mine_prefixes AS MATERIALIZED (
    SELECT c.prefix, c.documents, c.last_write, mine.cliente_id FROM mine
    CROSS JOIN LATERAL (
        SELECT prefix, documents, last_write FROM core_prefix_counts WHERE prefix = '{ROOT}.' || mine.cliente_id
        UNION ALL
        SELECT prefix, documents, last_write FROM core_prefix_counts
        WHERE prefix > '{ROOT}.' || mine.cliente_id || '.'
          AND prefix < '{ROOT}.' || mine.cliente_id || '.' || chr(1114111)
          AND left(prefix, length(mine.cliente_id) + {len(ROOT) + 2}) = '{ROOT}.' || mine.cliente_id || '.') c
    WHERE c.documents > 0)"""
# The same for a large scope (a regional manager's tens of thousands of customers): one hash join of the scope's
# customers with the namespaces under `clientes`, whose time does not grow with the scope (per-customer lookups did:
# 0.43 s for 31,702 customers at 1M documents, BENCHMARKS.md "Store managers' scope").
MINE_PREFIXES_LARGE = f"""
mine AS MATERIALIZED ({MINE}),
mine_prefixes AS MATERIALIZED (
    SELECT c.prefix, c.documents, c.last_write, mine.cliente_id
    FROM core_prefix_counts c JOIN mine ON split_part(c.prefix, '.', 2) = mine.cliente_id
    WHERE c.root = '{ROOT}' AND c.documents > 0)"""
# Customers in a scope from which its reads take the hash join above rather than one lookup per customer.
LARGE_SCOPE = 10_000
# Whether one namespace belongs to the scope (its customer is one of MINE).
PREFIX_IN_SCOPE = f"""
split_part(%(prefix)s, '.', 1) = '{ROOT}' AND split_part(%(prefix)s, '.', 2) IN ({MINE})"""

# A store value at `key` of a JSON object `obj`: a string or number, or each string of a list.
STORE_VALUES = """
CROSS JOIN LATERAL (
    SELECT {obj} ->> {key} AS tienda WHERE jsonb_typeof({obj} -> {key}) IN ('string', 'number')
    UNION ALL
    SELECT e FROM jsonb_array_elements_text(CASE WHEN jsonb_typeof({obj} -> {key}) = 'array' THEN {obj} -> {key} END) e
) st"""
# Source `metadata:<key>`: checkpoints whose metadata names a store; the customer from the same metadata, else from
# the `hilo` back-links of the customer's documents or from our conversation log.
SELECT_BY_METADATA = (
    """
WITH t AS MATERIALIZED (
    SELECT DISTINCT c.thread_id, st.tienda, coalesce({customer}) AS cliente_id FROM checkpoints c"""
    + STORE_VALUES.format(obj="c.metadata", key="{key}")
    + """
    WHERE c.metadata ? {key} AND st.tienda IS NOT NULL AND st.tienda <> ''
)
SELECT cliente_id, tienda FROM t WHERE cliente_id IS NOT NULL AND cliente_id <> ''
UNION
SELECT split_part(s.prefix, '.', 2), t.tienda FROM t JOIN core_store_shadow s ON s.hilo = t.thread_id
WHERE t.cliente_id IS NULL
UNION
SELECT v.subject_id, t.tienda FROM t
JOIN core_conversations v ON v.thread_id = t.thread_id AND v.subject_root = 'clientes'
WHERE t.cliente_id IS NULL"""
)
# The same apart (issue 52: the mapping, the shadow and the mirror of our conversation log are in the dashboard's own
# database): the (thread, store, customer from metadata) triples read from `checkpoints` on the agents' side ...
SELECT_METADATA_TRIPLES = (
    """
SELECT DISTINCT c.thread_id, st.tienda, coalesce({customer}) AS cliente_id FROM checkpoints c"""
    + STORE_VALUES.format(obj="c.metadata", key="{key}")
    + """
WHERE c.metadata ? {key} AND st.tienda IS NOT NULL AND st.tienda <> ''"""
)
# ... and the pairs made from them in ours, as SELECT_BY_METADATA makes them.
METADATA_PAIRS_GIVEN = """
WITH t AS MATERIALIZED (
    SELECT * FROM unnest(%(t_threads)s::text[], %(t_tiendas)s::text[], %(t_clientes)s::text[])
        AS t(thread_id, tienda, cliente_id)
)
SELECT cliente_id, tienda FROM t WHERE cliente_id IS NOT NULL AND cliente_id <> ''
UNION
SELECT split_part(s.prefix, '.', 2), t.tienda FROM t JOIN core_store_shadow s ON s.hilo = t.thread_id
WHERE t.cliente_id IS NULL
UNION
SELECT v.subject_id, t.tienda FROM t
JOIN core_conversations v ON v.thread_id = t.thread_id AND v.subject_root = 'clientes'
WHERE t.cliente_id IS NULL"""
# Source `document:<key>`: the customer's own documents.
SELECT_BY_DOCUMENT = (
    """
SELECT DISTINCT split_part(s.prefix, '.', 2) AS cliente_id, st.tienda FROM store s"""
    + STORE_VALUES.format(obj="s.value", key="{key}")
    + """
WHERE s.prefix LIKE 'clientes.%%' AND s.value ? {key} AND st.tienda IS NOT NULL AND st.tienda <> ''"""
)
# One source's pairs replace its rows (only the rows of `customers` when given: a follower's partial update): rows no
# longer named are deleted, new ones inserted, the rest kept as they are. One statement, one snapshot.
REPLACE_SOURCE = """
WITH new AS MATERIALIZED (
    SELECT DISTINCT n.cliente_id::text AS cliente_id, n.tienda::text AS tienda FROM ({pairs}) n
    WHERE n.cliente_id IS NOT NULL AND n.tienda IS NOT NULL AND n.cliente_id::text <> '' AND n.tienda::text <> ''
      AND (%(customers)s::text[] IS NULL OR n.cliente_id::text = ANY(%(customers)s::text[]))
), gone AS (
    DELETE FROM core_customer_stores m
    WHERE m.source = %(source)s AND (%(customers)s::text[] IS NULL OR m.cliente_id = ANY(%(customers)s::text[]))
      AND NOT EXISTS (SELECT 1 FROM new WHERE new.cliente_id = m.cliente_id AND new.tienda = m.tienda)
    RETURNING 1
), added AS (
    INSERT INTO core_customer_stores AS m (source, cliente_id, tienda, rank)
    SELECT %(source)s, cliente_id, tienda, %(rank)s FROM new
    ON CONFLICT (source, cliente_id, tienda) DO UPDATE SET rank = EXCLUDED.rank WHERE m.rank <> EXCLUDED.rank
    RETURNING 1
)
SELECT (SELECT count(DISTINCT cliente_id) FROM new) AS customers, (SELECT count(*) FROM new) AS pairs,
       (SELECT count(*) FROM gone) AS removed, (SELECT count(*) FROM added) AS added"""
QUERY_PAIRS = "SELECT * FROM unnest(%(clientes)s::text[], %(tiendas)s::text[]) AS q(cliente_id, tienda)"
UPSERT_SOURCE = """
INSERT INTO core_customer_store_sources (source, rank, refreshed_at, customers, pairs, ms, error)
VALUES (%(source)s, %(rank)s, now(), %(customers)s, %(pairs)s, %(ms)s, %(error)s)
ON CONFLICT (source) DO UPDATE SET rank = EXCLUDED.rank, refreshed_at = EXCLUDED.refreshed_at,
    customers = EXCLUDED.customers, pairs = EXCLUDED.pairs, ms = EXCLUDED.ms, error = EXCLUDED.error"""
DELETE_UNCONFIGURED = """
WITH r AS (DELETE FROM core_customer_stores WHERE NOT (source = ANY(%(sources)s::text[])) RETURNING 1)
DELETE FROM core_customer_store_sources WHERE NOT (source = ANY(%(sources)s::text[]))"""
# Each customer's stores are those of its best-ranked source.
RECOMPUTE_EFFECTIVE = """
UPDATE core_customer_stores m SET effective = (m.rank = b.best)
FROM (SELECT cliente_id, min(rank) AS best FROM core_customer_stores
      WHERE %(customers)s::text[] IS NULL OR cliente_id = ANY(%(customers)s::text[]) GROUP BY cliente_id) b
WHERE b.cliente_id = m.cliente_id AND m.effective <> (m.rank = b.best)"""
# Every customer the dashboard knows: namespaces under `clientes` with documents, customers our extraction read from
# checkpoint metadata and our conversation log name, and those a source named.
UPSERT_REFRESH = f"""
WITH known AS (
    SELECT split_part(prefix, '.', 2) AS cliente_id FROM core_prefix_counts WHERE root = '{ROOT}' AND documents > 0
    UNION SELECT cliente_id FROM core_thread_last WHERE cliente_id IS NOT NULL
    UNION SELECT subject_id FROM core_conversations WHERE subject_root = '{ROOT}'
    UNION SELECT cliente_id FROM core_customer_stores
), counted AS (
    SELECT count(*) AS customers,
           count(*) FILTER (WHERE EXISTS (SELECT 1 FROM core_customer_stores m
                                          WHERE m.cliente_id = k.cliente_id AND m.effective)) AS with_store
    FROM known k
)
INSERT INTO core_customer_store_refresh AS r (id, refreshed_at, trigger, customers, with_store, without_store, ms)
SELECT 1, now(), %(trigger)s, customers, with_store, customers - with_store, %(ms)s FROM counted
ON CONFLICT (id) DO UPDATE SET refreshed_at = EXCLUDED.refreshed_at, trigger = EXCLUDED.trigger,
    customers = EXCLUDED.customers, with_store = EXCLUDED.with_store, without_store = EXCLUDED.without_store,
    ms = EXCLUDED.ms
RETURNING refreshed_at, customers, with_store, without_store"""
SELECT_REFRESH = (
    "SELECT refreshed_at, trigger, customers, with_store, without_store, ms FROM core_customer_store_refresh"
)
SELECT_SOURCES = """
SELECT source, rank, refreshed_at, customers, pairs, ms, error FROM core_customer_store_sources ORDER BY rank, source"""
SELECT_SCOPE_CUSTOMERS = f"SELECT count(*) AS n FROM ({MINE}) x"


@dataclass(frozen=True)
class StoreSources:
    """The sources configured, in their order: the query (if any), then each key in checkpoint metadata, then each
    key in documents; `customer_keys`: the metadata keys naming the customer (SUBJECT_METADATA_KEYS)."""

    query: str | None
    keys: tuple[str, ...]
    customer_keys: tuple[str, ...]

    def __post_init__(self) -> None:
        for key in (*self.keys, *self.customer_keys):
            if not METADATA_KEY_SHAPE.match(key):
                raise StoreSourceConfigError(f"CUSTOMER_STORE_KEYS / SUBJECT_METADATA_KEYS: {key!r} is not a key name")
        if self.query is not None and "%(" in self.query:
            raise StoreSourceConfigError(
                "CUSTOMER_STORE_QUERY takes no parameters: it returns cliente_id, tienda for every customer"
            )

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> StoreSources:
        s = settings or load_settings()
        query = (s.customer_store_query or "").strip().rstrip(";").strip() or None
        return cls(query, tuple(s.customer_store_keys), tuple(s.subject_metadata_keys))

    def ordered(self) -> list[str]:
        return (
            ([QUERY_SOURCE] if self.query else [])
            + [METADATA_PREFIX + k for k in self.keys]
            + [DOCUMENT_PREFIX + k for k in self.keys]
        )

    def names(self) -> tuple[str, ...]:
        """The configured sources, sorted: what a Scope carries."""
        return tuple(sorted(self.ordered()))

    def scope(self, stores: Iterable[str]) -> Scope:
        return Scope(tuple(stores), self.names())


@dataclass(frozen=True)
class SourceResult:
    source: str
    rank: int
    customers: int | None
    pairs: int | None
    ms: int
    error: str | None = None


@dataclass(frozen=True)
class RefreshResult:
    refreshed_at: datetime
    customers: int
    with_store: int
    without_store: int
    sources: tuple[SourceResult, ...]

    @property
    def errors(self) -> dict[str, str]:
        return {s.source: s.error for s in self.sources if s.error}


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip()}"


def run_query(conn: psycopg.Connection[DictRow], query: str) -> list[tuple[str, str]]:
    """CUSTOMER_STORE_QUERY, read-only and bounded (as SUBJECT_THREAD_QUERY): its `cliente_id` and `tienda` columns,
    or its first two."""
    with conn.transaction():
        conn.execute("SET TRANSACTION READ ONLY")
        conn.execute(pgsql.SQL("SET LOCAL statement_timeout = {}").format(pgsql.Literal(QUERY_TIMEOUT_MS)))
        rows = conn.execute(query).fetchall()
    out = []
    for row in rows:
        values = list(row.values())
        if len(values) < 2:
            raise StoreSourceConfigError("CUSTOMER_STORE_QUERY must return two columns: cliente_id, tienda")
        cliente, tienda = row.get("cliente_id", values[0]), row.get("tienda", values[1])
        if cliente is not None and tienda is not None:
            out.append((str(cliente), str(tienda)))
    return out


def source_pairs_sql(source: str, sources: StoreSources) -> pgsql.Composable:
    """The SELECT of (cliente_id, tienda) of a metadata or document source."""
    key = pgsql.Literal(source.split(":", 1)[1])
    if source.startswith(METADATA_PREFIX):
        customer = pgsql.SQL(", ").join(
            pgsql.SQL("c.metadata ->> {}").format(pgsql.Literal(k)) for k in sources.customer_keys
        )
        return pgsql.SQL(SELECT_BY_METADATA).format(key=key, customer=customer or pgsql.SQL("NULL::text"))
    return pgsql.SQL(SELECT_BY_DOCUMENT).format(key=key)


def source_pairs_apart(
    agents: psycopg.Connection[DictRow], source: str, sources: StoreSources
) -> tuple[pgsql.Composable, dict[str, Any]]:
    """A metadata or document source's pairs for a mapping kept in another database than the agents' rows (issue 52):
    read on the agents' side (`agents`), given to REPLACE_SOURCE as arrays (the SELECT and its parameters)."""
    key = pgsql.Literal(source.split(":", 1)[1])
    if source.startswith(METADATA_PREFIX):
        customer = pgsql.SQL(", ").join(
            pgsql.SQL("c.metadata ->> {}").format(pgsql.Literal(k)) for k in sources.customer_keys
        )
        triples = pgsql.SQL(SELECT_METADATA_TRIPLES).format(key=key, customer=customer or pgsql.SQL("NULL::text"))
        rows = agents.execute(triples, prepare=False).fetchall()
        params = {
            "t_threads": [r["thread_id"] for r in rows],
            "t_tiendas": [r["tienda"] for r in rows],
            "t_clientes": [r["cliente_id"] for r in rows],
        }
        return pgsql.SQL(METADATA_PAIRS_GIVEN), params
    rows = agents.execute(pgsql.SQL(SELECT_BY_DOCUMENT).format(key=key), prepare=False).fetchall()
    return pgsql.SQL(QUERY_PAIRS), {"clientes": [r["cliente_id"] for r in rows], "tiendas": [r["tienda"] for r in rows]}


def replace_source(
    conn: psycopg.Connection[DictRow],
    source: str,
    rank: int,
    pairs: pgsql.Composable,
    params: dict[str, Any] | None = None,
    customers: list[str] | None = None,
) -> dict[str, int]:
    """Make `source`'s rows those `pairs` (a SELECT of cliente_id, tienda) returns; with `customers`, only those
    customers' rows (a change follower's update). `effective` is then stale until `recompute_effective`."""
    statement = pgsql.SQL(REPLACE_SOURCE).format(pairs=pairs)
    return one(
        conn.execute(statement, {**(params or {}), "source": source, "rank": rank, "customers": customers}).fetchone()
    )


def recompute_effective(conn: psycopg.Connection[DictRow], customers: list[str] | None = None) -> int:
    """Each customer's stores from its best-ranked source (all customers, or those given)."""
    return conn.execute(RECOMPUTE_EFFECTIVE, {"customers": customers}).rowcount


def refresh(db: Database, settings: Settings | None = None, *, trigger: str = "manual") -> RefreshResult:
    """Recompute the mapping from every configured source (the sweep's step, and on demand), in one transaction:
    readers see the previous mapping until it commits. A source that cannot be read keeps its previous rows and its
    error (no scoped manager sees any customer meanwhile). Raises StoreSourceConfigError for an unusable
    configuration (nothing changed)."""
    if trigger not in TRIGGERS:
        raise ValueError(f"trigger must be one of {', '.join(TRIGGERS)}, got {trigger!r}")
    sources = StoreSources.from_settings(settings)
    started = time.perf_counter()
    results: list[SourceResult] = []
    query_rows: list[tuple[str, str]] | None = None
    query_error: str | None = None
    query_ms = 0
    if sources.query:
        t = time.perf_counter()
        with db.connection() as conn:
            try:
                query_rows = run_query(conn, sources.query)
            except (psycopg.Error, StoreSourceConfigError) as exc:  # that source's error, shown on the pages
                query_error = _error(exc)
        query_ms = int((time.perf_counter() - t) * 1000)
    ours = db.ours  # where the mapping is kept (issue 52): the agents' database unless PG_DASHBOARD is apart
    with contextlib.ExitStack() as stack:
        conn = stack.enter_context(ours.connection())
        agents = conn if ours is db else stack.enter_context(db.connection())
        stack.enter_context(conn.transaction())
        conn.execute(REFRESH_LOCK)  # one refresh at a time
        for rank, source in enumerate(sources.ordered()):
            t = time.perf_counter()
            counts: dict[str, int] | None = None
            error = None
            if source == QUERY_SOURCE:
                error, ms = query_error, query_ms
                if query_rows is not None:
                    params = {"clientes": [c for c, _ in query_rows], "tiendas": [s for _, s in query_rows]}
                    counts = replace_source(conn, source, rank, pgsql.SQL(QUERY_PAIRS), params)
            else:
                try:
                    with conn.transaction():  # a savepoint: a failing source leaves the others' work
                        if agents is conn:
                            counts = replace_source(conn, source, rank, source_pairs_sql(source, sources))
                        else:  # the source read on the agents' side, its pairs written in ours
                            pairs, given = source_pairs_apart(agents, source, sources)
                            counts = replace_source(conn, source, rank, pairs, given)
                except psycopg.Error as exc:
                    error = _error(exc)
                ms = int((time.perf_counter() - t) * 1000)
            result = SourceResult(
                source, rank, counts["customers"] if counts else None, counts["pairs"] if counts else None, ms, error
            )
            conn.execute(UPSERT_SOURCE, result.__dict__)
            results.append(result)
        conn.execute(DELETE_UNCONFIGURED, {"sources": sources.ordered()})
        recompute_effective(conn)
        row = one(
            conn.execute(
                UPSERT_REFRESH, {"trigger": trigger, "ms": int((time.perf_counter() - started) * 1000)}
            ).fetchone()
        )
    return RefreshResult(row["refreshed_at"], row["customers"], row["with_store"], row["without_store"], tuple(results))


# --- the pages' reads ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceStatus:
    source: str
    rank: int
    refreshed_at: datetime
    customers: int | None
    pairs: int | None
    ms: int | None
    error: str | None


@dataclass(frozen=True)
class MappingStatus:
    """The mapping as the pages describe it: its last refresh (None: never computed), each source's, and what is
    configured now."""

    refreshed_at: datetime | None
    customers: int
    with_store: int
    without_store: int
    sources: tuple[SourceStatus, ...]
    configured: tuple[str, ...]

    @property
    def errors(self) -> dict[str, str]:
        return {s.source: s.error for s in self.sources if s.error}

    @property
    def stale_configuration(self) -> bool:
        """Computed from other sources than those configured now (recompute)."""
        return sorted(s.source for s in self.sources) != sorted(self.configured)

    @property
    def usable(self) -> bool:
        return self.refreshed_at is not None and not self.errors and not self.stale_configuration


def mapping_status(db: Database, configured: tuple[str, ...]) -> MappingStatus:
    """The last refresh and its sources (`configured`: StoreSources.names() now)."""
    with db.ours.connection(read_only=True) as conn:
        refresh_row = conn.execute(SELECT_REFRESH).fetchone()
        sources = tuple(SourceStatus(**r) for r in conn.execute(SELECT_SOURCES).fetchall())
    if refresh_row is None:
        return MappingStatus(None, 0, 0, 0, sources, configured)
    return MappingStatus(
        refresh_row["refreshed_at"],
        refresh_row["customers"],
        refresh_row["with_store"],
        refresh_row["without_store"],
        sources,
        configured,
    )


def scope_customers(db: Database, scope: Scope) -> int:
    """How many customers the mapping puts in the scope's stores (0 while it is not usable)."""
    return int(one(db.ours.fetch_one(SELECT_SCOPE_CUSTOMERS, scope.params()))["n"])


SELECT_MINE = f"SELECT cliente_id FROM ({MINE}) m ORDER BY 1"


def scope_customer_ids(db: Database, scope: Scope) -> list[str]:
    """The customers of the scope's stores (none while the mapping is not usable), read where the mapping is kept (the
    dashboard's own database, issue 52): for reads of the agents' tables, passed to them as an array."""
    return [r["cliente_id"] for r in db.ours.fetch(SELECT_MINE, scope.params())]


def large_scope(db: Database, scope: Scope) -> bool:
    """Whether the scope's reads take the plan made for many customers (LARGE_SCOPE)."""
    return scope_customers(db, scope) > LARGE_SCOPE
