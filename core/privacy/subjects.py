"""The threads about one customer: one answer, used by the Checkpoints page, the erasure and the access export.

LangGraph puts no customer id anywhere by itself (`create_agent` stores `{source, step, parents}` in
checkpoint metadata), so "the threads of C9" is found from several sources, each reported on its own:
- `metadata:<key>`: checkpoint metadata keys (config `SUBJECT_METADATA_KEYS`; our agents tag `cliente_id`,
  the Agent Server tags `user_id`);
- `pattern:<pattern>`: thread ids matching a configured pattern such as `cliente-{id}-*` (the id kept literal:
  `%` and `_` are escaped in LIKE);
- `store:hilo`: the `hilo` back-link the memory article's `recordar_preferencia` writes into each preference
  document (read before an erasure deletes the documents);
- `conversations`: our conversation log; `register`: earlier erasure requests;
- `query`: an optional SQL query on the application's own tables (`SUBJECT_THREAD_QUERY`), run in a READ ONLY
  transaction with a statement timeout.

`core.privacy.residue` then scans every thread no source attributed, for what remains of the customer.

`coverage` says how much of the checkpoint data no source attributes to anyone; `stored_coverage` is the pages' read
of it: the stored result, or, before one exists, a single computation in the background (one per process, one across
the replicas by an advisory lock), never one per session that opens a page meanwhile.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql as pgsql
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from core.agent_server import aegra
from core.config import DEFAULT_SUBJECT_METADATA_KEYS, DEFAULT_SUBJECT_THREAD_PATTERNS, Settings, load_settings
from core.db import Database, DatabaseUnavailable, one
from core.ids import CustomerId, InvalidIdentifier
from core.privacy import ours as ours_db

log = logging.getLogger(__name__)

ROOT = "clientes"
HILO_KEY = "hilo"  # the back-link field of the article's preference documents
QUERY_TIMEOUT_MS = 5000  # statement timeout of the configured query
PATTERN_SHAPE = re.compile(r"^[^{}]*\{id\}[^{}]*$")
METADATA_KEY_SHAPE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class AttributionConfigError(ValueError):
    """A configured pattern, metadata key or query is unusable (says which and why)."""


@dataclass(frozen=True)
class Attribution:
    """How threads are attributed to a customer (from Settings; see core/config.py)."""

    metadata_keys: tuple[str, ...] = DEFAULT_SUBJECT_METADATA_KEYS
    thread_patterns: tuple[str, ...] = DEFAULT_SUBJECT_THREAD_PATTERNS
    thread_query: str | None = None

    def __post_init__(self) -> None:
        for key in self.metadata_keys:
            if not METADATA_KEY_SHAPE.match(key):
                raise AttributionConfigError(f"metadata key {key!r} is not an identifier")
        for pattern in self.thread_patterns:
            if not PATTERN_SHAPE.match(pattern):
                raise AttributionConfigError(f"thread pattern {pattern!r} must contain {{id}} exactly once")
        if self.thread_query is not None and "%(id)s" not in self.thread_query:
            raise AttributionConfigError("SUBJECT_THREAD_QUERY must use %(id)s for the customer id")

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> Attribution:
        s = settings or load_settings()
        return cls(tuple(s.subject_metadata_keys), tuple(s.subject_thread_patterns), s.subject_thread_query or None)


def escape_like(text: str) -> str:
    """`text` as a literal inside a LIKE pattern with ESCAPE '\\'."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def like_for(pattern: str, customer_id: str | None) -> str:
    """The LIKE pattern of `pattern` (`*` = anything) for one customer, or for any customer (None)."""
    before, after = pattern.split("{id}")

    def lit(part: str) -> str:
        return "%".join(escape_like(p) for p in part.split("*"))

    middle = "%" if customer_id is None else escape_like(customer_id)
    return lit(before) + middle + lit(after)


# --- the sources ---------------------------------------------------------------------------------------

# Metadata keys and thread-id patterns are looked up in core_checkpoint_shadow, which the change follower keeps
# from the checkpoints' keys and metadata (migration 144: no index of ours on `checkpoints`); the erasure and the
# access export sync with the follower first. `subjects` holds each checkpoint's top-level scalar metadata entries
# as `metadata ->> key` gives them (GIN index); the LIKE pattern is a literal in the statement, not a parameter (a
# generic plan of `LIKE $1` can use no index).
SELECT_BY_METADATA = """
SELECT DISTINCT thread_id FROM core_checkpoint_shadow WHERE subjects @> jsonb_build_object({key}::text, %(id)s::text)"""
SELECT_BY_PATTERN = r"SELECT DISTINCT thread_id FROM core_checkpoint_shadow WHERE thread_id LIKE {like} ESCAPE '\'"
SELECT_BY_HILO = r"""
SELECT DISTINCT value ->> 'hilo' AS thread_id FROM store
WHERE (prefix = %(prefix)s OR prefix LIKE %(prefix_like)s ESCAPE '\') AND value ? 'hilo'
  AND jsonb_typeof(value -> 'hilo') = 'string'"""
SELECT_BY_CONVERSATIONS = """
SELECT DISTINCT thread_id FROM core_conversations WHERE subject_root = %(root)s AND subject_id = %(id)s"""
SELECT_BY_REGISTER = """
SELECT DISTINCT unnest(thread_ids) AS thread_id FROM core_erasure_register WHERE customer_id = %(id)s"""
# Of the attributed threads, those the checkpoint tables hold now: what every page counts as the customer's threads
# (the Checkpoints page lists them from the same table; the register remembers erased ones, which hold nothing).
SELECT_HELD = "SELECT DISTINCT thread_id FROM checkpoints WHERE thread_id = ANY(%(threads)s)"


@dataclass
class Subjects:
    """The threads attributed to one customer, with the sources that found each one."""

    customer_id: CustomerId
    threads: dict[str, list[str]] = field(default_factory=dict)  # thread_id -> sources
    by_source: dict[str, list[str]] = field(default_factory=dict)  # source -> thread ids (also when empty)
    errors: dict[str, str] = field(default_factory=dict)  # source -> why it could not run
    held: list[str] = field(default_factory=list)  # the threads the checkpoint tables hold now (sorted)
    # threads without a checkpoint that an agent server's own tables hold (a failed first run: its rows are counted
    # and erased under the server's tables), sorted
    server_only: list[str] = field(default_factory=list)

    @property
    def thread_ids(self) -> list[str]:
        return sorted(self.threads)

    def add(self, source: str, thread_ids: Iterable[str]) -> None:
        found = sorted({t for t in thread_ids if t})
        self.by_source[source] = found
        for t in found:
            self.threads.setdefault(t, []).append(source)


def subject_params(customer_id: str) -> dict[str, Any]:
    prefix = f"{ROOT}.{customer_id}"
    return {"id": customer_id, "root": ROOT, "prefix": prefix, "prefix_like": escape_like(prefix) + ".%"}


def _run_query(conn: psycopg.Connection[DictRow], query: str, customer_id: str) -> list[str]:
    """The configured query, read-only and bounded; its first column (or `thread_id`) is the thread."""
    with conn.transaction():
        conn.execute("SET TRANSACTION READ ONLY")
        conn.execute(pgsql.SQL("SET LOCAL statement_timeout = {}").format(pgsql.Literal(QUERY_TIMEOUT_MS)))
        cur = conn.execute(query, {"id": customer_id})
        rows = cur.fetchall()
    out = []
    for row in rows:
        value = row.get("thread_id", next(iter(row.values()), None)) if isinstance(row, dict) else row[0]
        if value is not None:
            out.append(str(value))
    return out


def resolve_conn(
    conn: psycopg.Connection[DictRow],
    customer_id: CustomerId,
    config: Attribution,
    ours: psycopg.Connection[DictRow] | None = None,
) -> Subjects:
    """`resolve` on an open connection to the agents' database, for an id already parsed; what the dashboard keeps
    (the change follower's shadow, the register) is read in our database (`ours`, or reached from `conn`)."""
    params = subject_params(customer_id)
    subjects = Subjects(customer_id)
    with nullcontext(ours) if ours is not None else ours_db.connect(conn) as mine:
        for key in config.metadata_keys:
            query = pgsql.SQL(SELECT_BY_METADATA).format(key=pgsql.Literal(key))
            subjects.add(f"metadata:{key}", (r["thread_id"] for r in mine.execute(query, {"id": customer_id})))
        for pattern in config.thread_patterns:
            query = pgsql.SQL(SELECT_BY_PATTERN).format(like=pgsql.Literal(like_for(pattern, customer_id)))
            subjects.add(f"pattern:{pattern}", (r["thread_id"] for r in mine.execute(query)))  # `%` is literal
        register = [r["thread_id"] for r in mine.execute(SELECT_BY_REGISTER, params)]
    subjects.add("store:hilo", (r["thread_id"] for r in conn.execute(SELECT_BY_HILO, params)))
    subjects.add("conversations", (r["thread_id"] for r in conn.execute(SELECT_BY_CONVERSATIONS, params)))
    subjects.add("register", register)
    server = aegra.detect_conn(conn)
    if server is not None:  # an Agent Protocol server's own rows: thread metadata, run context and config
        for key in config.metadata_keys:
            subjects.add(f"aegra:{key}", aegra.threads_by_key(conn, server, key, customer_id))
    if config.thread_query:
        try:
            subjects.add("query", _run_query(conn, config.thread_query, customer_id))
        except psycopg.Error as exc:  # said on the page and in the evidence, never hidden
            subjects.errors["query"] = f"{type(exc).__name__}: {str(exc).strip()}"
    subjects.held = sorted(r["thread_id"] for r in conn.execute(SELECT_HELD, {"threads": subjects.thread_ids}))
    if server is not None:
        subjects.server_only = aegra.server_held(conn, set(subjects.threads) - set(subjects.held))
    return subjects


def resolve(db: Database, customer_id: str, config: Attribution | None = None) -> Subjects:
    """The threads about `customer_id`, each with its sources. Raises InvalidIdentifier for a bad id (parsed here
    unless it already is a CustomerId)."""
    customer_id = CustomerId.parse(customer_id)
    config = config or Attribution.from_settings()
    with db.connection() as conn:
        return resolve_conn(conn, customer_id, config)


# --- attribution coverage ---------------------------------------------------------------------------------

# Both coverage queries end the same way: per thread `t` (bytes, tagged), the `hilo` links and our logs -> totals.
# IN, not EXISTS: under OR a correlated EXISTS is re-run per thread over the whole CTE (10k threads x 100k
# back-links ran for minutes); `IN (subquery)` is one hashed subplan.
COVERAGE_TOTALS = """
), a AS (
    SELECT t.*, (t.tagged OR t.thread_id LIKE ANY(%(likes)s::text[])
                 OR t.thread_id IN (SELECT h.thread_id FROM hilo h)
                 OR t.thread_id IN (SELECT o.thread_id FROM own o)) AS attributed
    FROM t
)
SELECT count(*) AS threads, count(*) FILTER (WHERE NOT attributed) AS unattributed_threads,
       coalesce(sum(bytes), 0) AS bytes, coalesce(sum(bytes) FILTER (WHERE NOT attributed), 0) AS unattributed_bytes
FROM a"""

# Per thread: bytes in the three checkpoint tables, and whether any source attributes it to *someone*
# (the configured query is per customer and cannot be asked "anyone": it is left out, and said so).
COVERAGE_SQL = (
    r"""
WITH c AS (
    SELECT thread_id, sum(pg_column_size(checkpoint) + pg_column_size(metadata)) AS bytes,
           bool_or(metadata ?| %(keys)s::text[]) AS tagged
    FROM checkpoints GROUP BY thread_id
), b AS (
    SELECT thread_id, sum(coalesce(octet_length(blob), 0)) AS bytes FROM checkpoint_blobs GROUP BY thread_id
), w AS (
    SELECT thread_id, sum(coalesce(octet_length(blob), 0)) AS bytes FROM checkpoint_writes GROUP BY thread_id
), t AS (
    SELECT coalesce(c.thread_id, b.thread_id, w.thread_id) AS thread_id,
           coalesce(c.bytes, 0) + coalesce(b.bytes, 0) + coalesce(w.bytes, 0) AS bytes, coalesce(c.tagged, false) AS
           tagged
    FROM c FULL JOIN b USING (thread_id) FULL JOIN w USING (thread_id)
), hilo AS (
    SELECT DISTINCT hilo AS thread_id FROM core_store_shadow WHERE hilo IS NOT NULL
), own AS (
    SELECT thread_id FROM core_conversations WHERE subject_root = 'clientes'
    UNION SELECT unnest(%(erased)s::text[])
"""
    + COVERAGE_TOTALS
)
# The same where our database is apart (issue 52): the `hilo` links (core_store_shadow) and our logs (the mirror of
# core_conversations) read in ours first (SELECT_LINKED_THREADS) and passed as arrays.
COVERAGE_APART_SQL = (
    COVERAGE_SQL[: COVERAGE_SQL.index("), hilo AS (")]
    + """), hilo AS (
    SELECT unnest(%(hilo)s::text[]) AS thread_id
), own AS (
    SELECT unnest(%(own)s::text[]) AS thread_id
    UNION SELECT unnest(%(erased)s::text[])
"""
    + COVERAGE_TOTALS
)
SELECT_LINKED_THREADS = """
SELECT (SELECT coalesce(array_agg(DISTINCT hilo), '{}') FROM core_store_shadow WHERE hilo IS NOT NULL) AS hilo,
       (SELECT coalesce(array_agg(thread_id), '{}') FROM core_conversations WHERE subject_root = 'clientes') AS own"""

# COVERAGE_SQL above reads the three checkpoint tables and hashes every thread (it filled the disk at 10M): the
# pages' live fallback before any sweep. The sweep computes the same figures from core_thread_storage right after
# refreshing it (per-thread bytes, and which configured metadata keys the thread's checkpoints carry: 048), one
# thread_id range (lo, hi] at a time: the `hilo` links (core_store_shadow.hilo, kept by the change follower) and
# our logs of that range only, so memory and temp space are bounded by the batch, not by the number of threads.
SELECT_COVERAGE_BATCH_END = """
SELECT thread_id AS hi FROM core_thread_storage WHERE {after} ORDER BY thread_id OFFSET %(skip)s LIMIT 1"""
COVERAGE_BATCH_SQL = (
    r"""
WITH t AS (
    SELECT thread_id, total_bytes AS bytes, metadata_keys && %(keys)s::text[] AS tagged
    FROM core_thread_storage WHERE {range}
), hilo AS (
    SELECT DISTINCT hilo AS thread_id FROM core_store_shadow WHERE hilo IS NOT NULL AND {hilo_range}
), own AS (
    SELECT thread_id FROM core_conversations WHERE subject_root = 'clientes' AND {range}
    UNION SELECT x.thread_id FROM unnest(%(erased)s::text[]) AS x(thread_id) WHERE {x_range}
"""
    + COVERAGE_TOTALS
)
# Every thread an erasure request named, read in our database (the register's, issue 52) and passed to both as an
# array: the register and the checkpoint tables may be two databases.
SELECT_ERASED_THREADS = (
    "SELECT coalesce(array_agg(DISTINCT t), '{}') AS threads FROM core_erasure_register, unnest(thread_ids) AS t"
)
COVERAGE_BATCH_THREADS = 50_000  # core_thread_storage rows per batch
LIVE_COVERAGE_TIMEOUT_MS = 5_000  # a page counting it live, before any sweep has (see _live_coverage)


@dataclass(frozen=True)
class Coverage:
    threads: int
    unattributed_threads: int
    bytes: int
    unattributed_bytes: int
    query_configured: bool
    as_of: datetime | None = None  # when the sweep computed it (core_coverage_snapshot); None: computed now
    sweep_run_id: int | None = None  # the sweep run that computed it (None: computed outside a sweep, or now)
    sweep_started_at: datetime | None = None  # that run's logged start

    @property
    def thread_share(self) -> float:
        """Share of threads no source attributes (0..1; 0 when there are no threads)."""
        return self.unattributed_threads / self.threads if self.threads else 0.0

    @property
    def byte_share(self) -> float:
        return self.unattributed_bytes / self.bytes if self.bytes else 0.0


SELECT_SNAPSHOT = """
SELECT r.*, (SELECT l.started_at FROM core_sweep_log l WHERE l.id = r.sweep_run_id) AS sweep_started_at
FROM core_coverage_snapshot r WHERE config = %(config)s"""
UPSERT_SNAPSHOT = """
INSERT INTO core_coverage_snapshot (config, threads, unattributed_threads, bytes, unattributed_bytes, sweep_run_id)
VALUES (%(config)s, %(threads)s, %(unattributed_threads)s, %(bytes)s, %(unattributed_bytes)s, %(sweep_run)s)
ON CONFLICT (config) DO UPDATE SET threads = EXCLUDED.threads, unattributed_threads = EXCLUDED.unattributed_threads,
    bytes = EXCLUDED.bytes, unattributed_bytes = EXCLUDED.unattributed_bytes, computed_at = now(),
    sweep_run_id = EXCLUDED.sweep_run_id
RETURNING computed_at, sweep_run_id,
          (SELECT l.started_at FROM core_sweep_log l WHERE l.id = %(sweep_run)s) AS sweep_started_at"""


def _snapshot_key(config: Attribution) -> Jsonb:
    return Jsonb({"metadata_keys": sorted(config.metadata_keys), "thread_patterns": sorted(config.thread_patterns)})


def _live_coverage(db: Database, config: Attribution) -> Coverage:
    """The coverage counted now, for at most LIVE_COVERAGE_TIMEOUT_MS (47 s at 10M checkpoint writes, where it also
    needs gigabytes of temp space): past it, DatabaseUnavailable says the next sweep will compute it."""
    likes = [like_for(p, None) for p in config.thread_patterns]
    ours = db.ours
    erased = one(ours.fetch_one(SELECT_ERASED_THREADS))["threads"]
    params = {"keys": list(config.metadata_keys), "likes": likes, "erased": erased}
    query = COVERAGE_SQL
    if ours is not db:  # issue 52: the links and our logs read in ours, passed to the agents' side as arrays (2Q)
        query = COVERAGE_APART_SQL
        params.update(one(ours.fetch_one(SELECT_LINKED_THREADS, read_only=False)))
    with db.connection() as conn, conn.transaction():
        conn.execute(pgsql.SQL("SET LOCAL statement_timeout = {}").format(pgsql.Literal(LIVE_COVERAGE_TIMEOUT_MS)))
        try:
            row = one(conn.execute(query, params).fetchone())
        except psycopg.errors.QueryCanceled as exc:  # raised here: db.connection() would call it "not reachable"
            raise DatabaseUnavailable(
                f"no sweep has computed the attribution coverage yet, and counting it now took more than "
                f"{LIVE_COVERAGE_TIMEOUT_MS / 1000:g} s: the next sweep computes it"
            ) from exc
    return _coverage_of(row, config)


def _coverage_of(row: dict, config: Attribution, as_of: datetime | None = None) -> Coverage:
    return Coverage(
        int(row["threads"]),
        int(row["unattributed_threads"]),
        int(row["bytes"]),
        int(row["unattributed_bytes"]),
        bool(config.thread_query),
        as_of,
        row.get("sweep_run_id"),
        row.get("sweep_started_at"),
    )


def coverage_from_storage(
    conn: psycopg.Connection[DictRow], config: Attribution, batch_threads: int = COVERAGE_BATCH_THREADS
) -> Coverage:
    """The coverage computed from core_thread_storage as it stands (see COVERAGE_BATCH_SQL), in batches of thread_id
    ranges, in one REPEATABLE READ transaction on `conn` (dict rows, autocommit)."""
    if batch_threads < 1:
        raise ValueError(f"batch_threads must be >= 1, got {batch_threads}")
    # every table it reads is in our database (issue 52: core_thread_storage, core_store_shadow, the mirror of
    # core_conversations, the register): one database, `conn` itself where ours is the agents'
    with ours_db.connect(conn) as mine:
        erased = one(mine.execute(SELECT_ERASED_THREADS).fetchone())["threads"]
        return _coverage_from_storage(mine, config, batch_threads, erased)


def _coverage_from_storage(
    conn: psycopg.Connection[DictRow], config: Attribution, batch_threads: int, erased: list[str]
) -> Coverage:
    from core.storage.storage import key_ranges, thread_ranges

    params = {
        "keys": list(config.metadata_keys),
        "likes": [like_for(p, None) for p in config.thread_patterns],
        "erased": erased,
    }
    totals = {"threads": 0, "unattributed_threads": 0, "bytes": 0, "unattributed_bytes": 0}
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
        for lo, hi in thread_ranges(conn, SELECT_COVERAGE_BATCH_END, batch_threads - 1):
            query = pgsql.SQL(COVERAGE_BATCH_SQL).format(
                range=key_ranges(lo, hi),
                hilo_range=key_ranges(lo, hi, "hilo"),
                x_range=key_ranges(lo, hi, "x.thread_id"),
            )
            found = one(conn.execute(query, params).fetchone())
            for k in totals:
                totals[k] += int(found[k])
    return _coverage_of(totals, config)


def refresh_coverage(
    db: Database,
    config: Attribution | None = None,
    *,
    storage_refreshed: bool = False,
    batch_rows: int | None = None,
    batch_threads: int = COVERAGE_BATCH_THREADS,
    sweep_run: int | None = None,
) -> Coverage:
    """The sweep job's step: compute the coverage now and keep it for the pages (`sweep_run`: the run computing it,
    which the pages name).

    Computed from core_thread_storage (bounded temp space at any size, issue 14). The sweep has just refreshed it
    (`storage_refreshed=True`); otherwise, or when that refresh did not record every configured metadata key, it
    is refreshed here first (`batch_rows` rows per table per batch: core.storage.storage)."""
    from core.storage import storage

    config = config or Attribution.from_settings()
    kept = db.ours.fetch_one(storage.SELECT_STORAGE_REFRESH, read_only=False) if storage_refreshed else None
    if kept is None or not set(config.metadata_keys) <= set(kept["metadata_keys"]):
        storage.refresh_thread_storage(
            db,
            config.metadata_keys,
            storage.STORAGE_BATCH_ROWS if batch_rows is None else batch_rows,
            sweep_run=sweep_run,
        )
    with db.connection() as conn:
        cov = coverage_from_storage(conn, config, batch_threads)
    kept = one(
        db.ours.fetch_one(
            UPSERT_SNAPSHOT,
            {
                "config": _snapshot_key(config),
                "threads": cov.threads,
                "unattributed_threads": cov.unattributed_threads,
                "bytes": cov.bytes,
                "unattributed_bytes": cov.unattributed_bytes,
                "sweep_run": sweep_run,
            },
            read_only=False,
        )
    )
    return replace(
        cov, as_of=kept["computed_at"], sweep_run_id=kept["sweep_run_id"], sweep_started_at=kept["sweep_started_at"]
    )


def coverage(db: Database, config: Attribution | None = None) -> Coverage:
    """How much checkpoint data no source (metadata keys, patterns, `hilo` links, our logs) attributes: as of the
    last sweep that computed it with this configuration (`as_of`), else computed now."""
    config = config or Attribution.from_settings()
    row = db.ours.fetch_one(SELECT_SNAPSHOT, {"config": _snapshot_key(config)})
    if row is None:
        return _live_coverage(db, config)
    return _coverage_of(row, config, row["computed_at"])


COVERAGE_LOCK_ID = 0x636F7265_636F7665  # "corecove": one coverage computation at a time across the replicas
COVERAGE_WAIT_S = 2.0  # a page read waits this long for the computation it joined, then says it is being computed


@dataclass(frozen=True)
class CoverageComputing:
    """No stored coverage yet: its computation runs in the background since `since` (time.time())."""

    since: float


@dataclass
class _Flight:
    since: float
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None


class _CoverageFlight:
    """The background computations of the coverage: at most one per DSN and configuration in this process (every
    session asking meanwhile joins it); its thread takes COVERAGE_LOCK_ID and computes only if the coverage is still
    not stored, so a replica computing it already is waited for, not doubled."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[tuple[str, str], _Flight] = {}
        self.computations = 0  # computations this process has run

    def join(self, db: Database, config: Attribution) -> _Flight:
        key = (db.dsn, json.dumps(_snapshot_key(config).obj, sort_keys=True))
        with self._lock:
            flight = self._running.get(key)
            if flight is None:
                flight = self._running[key] = _Flight(time.time())
                threading.Thread(target=self._run, args=(db, config, key, flight), name="coverage", daemon=True).start()
        return flight

    def _run(self, db: Database, config: Attribution, key: tuple[str, str], flight: _Flight) -> None:
        try:
            with psycopg.connect(db.dsn, autocommit=True) as conn:
                conn.execute("SELECT pg_advisory_lock(%s)", (COVERAGE_LOCK_ID,))  # after another replica's, if any
                try:
                    if db.ours.fetch_one(SELECT_SNAPSHOT, {"config": _snapshot_key(config)}, read_only=False) is None:
                        with self._lock:
                            self.computations += 1
                        refresh_coverage(db, config)
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (COVERAGE_LOCK_ID,))
        except Exception as exc:  # said to the sessions that joined it; the next read starts it again
            log.exception("attribution coverage: the background computation failed")
            flight.error = str(exc).strip() or type(exc).__name__
        finally:
            with self._lock:
                self._running.pop(key, None)
            flight.done.set()


COVERAGE_FLIGHT = _CoverageFlight()


def stored_coverage(
    db: Database, config: Attribution | None = None, *, wait: bool = True
) -> Coverage | CoverageComputing:
    """The pages' coverage: as of the last computation stored for this configuration (by a sweep, or by the one
    background computation this joins or starts when there is none yet, waited for until COVERAGE_WAIT_S after it
    started: past that, CoverageComputing at once). Never a count per session. Call it on the primary (the
    computation stores its result). `wait=False`: no wait (a page polling for the result)."""
    config = config or Attribution.from_settings()
    row = db.ours.fetch_one(SELECT_SNAPSHOT, {"config": _snapshot_key(config)}, read_only=False)
    if row is None:
        flight = COVERAGE_FLIGHT.join(db, config)
        # a computation that has run COVERAGE_WAIT_S is a long one: a session joining it later is told so at once,
        # not held (at 1M checkpoints every Erasure page run waited 2 s, and its poll as long again: issue 54 #10)
        left = COVERAGE_WAIT_S - (time.time() - flight.since) if wait else 0.0
        if not flight.done.wait(max(0.0, left)):
            return CoverageComputing(flight.since)
        if flight.error is not None:
            raise DatabaseUnavailable(f"the attribution coverage could not be computed: {flight.error}")
        row = db.ours.fetch_one(SELECT_SNAPSHOT, {"config": _snapshot_key(config)}, read_only=False)
        if row is None:  # computed for another configuration meanwhile: the next read joins a new computation
            return CoverageComputing(flight.since)
    return _coverage_of(row, config, row["computed_at"])


__all__ = [
    "Attribution",
    "AttributionConfigError",
    "Coverage",
    "CoverageComputing",
    "InvalidIdentifier",
    "Subjects",
    "coverage",
    "coverage_from_storage",
    "like_for",
    "refresh_coverage",
    "resolve",
    "resolve_conn",
    "stored_coverage",
]
