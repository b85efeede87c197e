"""Where the checkpoint bytes go (issue 27), for the Checkpoints page's Storage view: bytes per channel, bytes per step
and the threads that grow faster than linearly, orphans, and PostgreSQL's own table statistics.

The sweep's storage refresh (core/checkpoints/storage.py) keeps `core_channel_storage`, `core_thread_growth` and the
orphan totals in the same batches of thread_id ranges and the same snapshot as `core_thread_storage`, and, when
`KNOWN_THREADS_QUERY` is configured, which threads the application no longer knows; one thread is also read live.
Only keys, sizes and versions are read, never a payload (`octet_length` of a TOASTed value reads its header)."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import psycopg
from psycopg import sql as pgsql

from core.db import Database

# Bytes per (thread, channel) in one range: blobs of its values and writes to it.
CHANNELS = """
WITH b AS (
    SELECT thread_id, channel, count(*) AS blobs, sum(bytes) AS blob_bytes
    FROM (SELECT thread_id, channel, coalesce(octet_length(blob), 0) AS bytes FROM checkpoint_blobs
          WHERE {range} OFFSET 0) x
    GROUP BY 1, 2
), w AS (
    SELECT thread_id, channel, count(*) AS writes, sum(bytes) AS write_bytes
    FROM (SELECT thread_id, channel, coalesce(octet_length(blob), 0) AS bytes FROM checkpoint_writes
          WHERE {range} OFFSET 0) x
    GROUP BY 1, 2
), both_ AS (
    SELECT coalesce(b.thread_id, w.thread_id) AS thread_id, coalesce(b.channel, w.channel) AS channel,
           coalesce(b.blobs, 0) AS blobs, coalesce(b.blob_bytes, 0) AS blob_bytes, coalesce(w.writes, 0) AS writes,
           coalesce(w.write_bytes, 0) AS write_bytes
    FROM b FULL JOIN w ON w.thread_id = b.thread_id AND w.channel = b.channel
)"""
INSERT_CHANNELS = CHANNELS + """
INSERT INTO core_channel_storage (thread_id, channel, blobs, blob_bytes, writes, write_bytes)
SELECT thread_id, channel, blobs, blob_bytes, writes, write_bytes FROM both_"""
SELECT_THREAD_CHANNELS = CHANNELS + """
SELECT channel, blobs, blob_bytes, writes, write_bytes, blob_bytes + write_bytes AS total_bytes FROM both_
ORDER BY total_bytes DESC, channel"""

# What each checkpoint added, in order: its own row, the blobs of the channels whose version changed since the
# previous checkpoint of its namespace, and its writes. `n` numbers a thread's checkpoints (all namespaces) by id.
STEPS = """
WITH c AS MATERIALIZED (
    SELECT thread_id, checkpoint_ns, checkpoint_id, metadata ->> 'step' AS step,
           checkpoint -> 'channel_versions' AS versions,
           lag(checkpoint -> 'channel_versions') OVER (PARTITION BY thread_id, checkpoint_ns ORDER BY checkpoint_id)
               AS previous,
           pg_column_size(checkpoint) + pg_column_size(metadata) AS checkpoint_bytes
    FROM checkpoints WHERE {range}
), blobs AS (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, sum(coalesce(octet_length(b.blob), 0)) AS bytes
    FROM c
    CROSS JOIN LATERAL jsonb_each_text(coalesce(c.versions, '{{}}')) AS e(channel, version)
    JOIN checkpoint_blobs b ON b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
                           AND b.channel = e.channel AND b.version = e.version
    WHERE c.previous ->> e.channel IS DISTINCT FROM e.version
    GROUP BY 1, 2, 3
), w AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, sum(coalesce(octet_length(blob), 0)) AS bytes
    FROM checkpoint_writes WHERE {range} GROUP BY 1, 2, 3
), steps AS (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.step,
           row_number() OVER (PARTITION BY c.thread_id ORDER BY c.checkpoint_id) AS n,
           c.checkpoint_bytes, coalesce(b.bytes, 0) AS blob_bytes, coalesce(w.bytes, 0) AS write_bytes
    FROM c
    LEFT JOIN blobs b USING (thread_id, checkpoint_ns, checkpoint_id)
    LEFT JOIN w USING (thread_id, checkpoint_ns, checkpoint_id)
)"""
MIN_STEPS = 5  # fewer steps say nothing about a thread's growth
INSERT_GROWTH = STEPS + f"""
INSERT INTO core_thread_growth (thread_id, steps, bytes, first_step_bytes, last_step_bytes, slope, superlinear)
SELECT thread_id, count(*), sum(bytes), (array_agg(bytes ORDER BY n))[1], (array_agg(bytes ORDER BY n DESC))[1],
       regr_slope(bytes, n), coalesce(count(*) >= {MIN_STEPS} AND regr_slope(bytes, n) * count(*) > avg(bytes), false)
FROM (SELECT thread_id, n, checkpoint_bytes + blob_bytes + write_bytes AS bytes FROM steps) s
GROUP BY thread_id"""
SELECT_STEPS = STEPS + """
SELECT n, checkpoint_ns, checkpoint_id, step, checkpoint_bytes, blob_bytes, write_bytes,
       checkpoint_bytes + blob_bytes + write_bytes AS bytes
FROM steps ORDER BY n"""

# Orphans in one range: blobs whose (thread, namespace, channel, version) no checkpoint references; writes whose
# checkpoint is not there.
SELECT_ORPHANS = """
WITH refs AS (
    SELECT DISTINCT thread_id, checkpoint_ns, e.key AS channel, e.value AS version
    FROM checkpoints CROSS JOIN LATERAL jsonb_each_text(coalesce(checkpoint -> 'channel_versions', '{{}}')) e
    WHERE {range}
), b AS (
    SELECT count(*) AS n, coalesce(sum(x.bytes), 0) AS bytes
    FROM (SELECT thread_id, checkpoint_ns, channel, version, coalesce(octet_length(blob), 0) AS bytes
          FROM checkpoint_blobs WHERE {range}) x
    LEFT JOIN refs r USING (thread_id, checkpoint_ns, channel, version)
    WHERE r.thread_id IS NULL
), w AS (
    SELECT count(*) AS n, coalesce(sum(coalesce(octet_length(w.blob), 0)), 0) AS bytes
    FROM checkpoint_writes w
    WHERE {range} AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = w.thread_id
                                  AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id)
)
SELECT b.n AS blobs, b.bytes AS blob_bytes, w.n AS writes, w.bytes AS write_bytes FROM b, w"""

# Threads the application no longer knows: the configured KNOWN_THREADS_QUERY (every thread_id the application
# knows; SUBJECT_THREAD_QUERY cannot say it: it answers for one customer) restricted to one range, run in the refresh's
# snapshot inside a savepoint that is rolled back, READ ONLY and under a statement timeout. The range is put on the
# query's `thread_id` (as text: a no-op on a text column, whose index it can then use), so each batch reads only its
# own range of the application's threads.
KNOWN_QUERY_TIMEOUT_MS = 5000  # per range
SELECT_KNOWN = "SELECT DISTINCT (q.thread_id)::text AS thread_id FROM ({query}) q WHERE {range}"
KNOWN_RANGE = "(q.thread_id)::text"
KNOWN_COLUMN = "coalesce(c.thread_id, b.thread_id, w.thread_id) = ANY({}::text[])"  # in storage.INSERT_STORAGE_BATCH
NOT_CHECKED = pgsql.SQL("NULL::boolean")

CLEAR = ("DELETE FROM core_channel_storage", "DELETE FROM core_thread_growth")
RECORD_ORPHANS = """
UPDATE core_thread_storage_refresh SET orphan_blobs = %(blobs)s, orphan_blob_bytes = %(blob_bytes)s,
       orphan_writes = %(writes)s, orphan_write_bytes = %(write_bytes)s, unknown_threads = %(unknown_threads)s,
       unknown_thread_bytes = %(unknown_thread_bytes)s, unknown_threads_error = %(unknown_threads_error)s"""


class KnownThreadsQueryError(ValueError):
    """KNOWN_THREADS_QUERY is unusable as configured (says why)."""


def known_threads_query(query: str | None) -> str | None:
    """The configured query ready to wrap (trailing `;` removed), None when none is configured;
    KnownThreadsQueryError for a per-customer query."""
    query = (query or "").strip().rstrip(";").strip()
    if "%(id)s" in query:
        raise KnownThreadsQueryError("KNOWN_THREADS_QUERY lists every thread the application knows and takes no "
                                     "%(id)s (a query for one customer is SUBJECT_THREAD_QUERY)")
    return query or None


@dataclass
class Orphans:
    """The refresh's orphans, added up batch by batch. `known_query`: KNOWN_THREADS_QUERY (None: nothing can tell
    which threads the application no longer knows); `unknown_threads_error`: why it could not run."""

    blobs: int = 0
    blob_bytes: int = 0
    writes: int = 0
    write_bytes: int = 0
    known_query: str | None = None
    unknown_threads: int = 0
    unknown_thread_bytes: int = 0
    unknown_threads_error: str | None = None

    @classmethod
    def configured(cls, query: str | None) -> "Orphans":
        try:
            return cls(known_query=known_threads_query(query))
        except KnownThreadsQueryError as exc:
            return cls(known_query=query, unknown_threads_error=str(exc))

    @property
    def checking(self) -> bool:
        return self.known_query is not None and self.unknown_threads_error is None

    def known_column(self, conn: psycopg.Connection, known_range: pgsql.Composable) -> pgsql.Composable:
        """The `known` value of a batch's threads for its INSERT: whether the query returns each (NULL when nothing
        checks); `known_range`: the batch's range on `(q.thread_id)::text`. A failure of the query is kept in
        `unknown_threads_error`."""
        if not self.checking:
            return NOT_CHECKED
        query = pgsql.SQL(SELECT_KNOWN).format(query=pgsql.SQL(self.known_query), range=known_range)
        try:
            with conn.transaction(force_rollback=True):  # a savepoint: READ ONLY and the timeout end with it
                conn.execute("SET TRANSACTION READ ONLY")
                conn.execute(pgsql.SQL("SET LOCAL statement_timeout = {}").format(
                    pgsql.Literal(KNOWN_QUERY_TIMEOUT_MS)))
                known = [r["thread_id"] for r in conn.execute(query, prepare=False)]
        except psycopg.Error as exc:  # shown on the page, never hidden
            self.unknown_threads_error = f"KNOWN_THREADS_QUERY: {type(exc).__name__}: {str(exc).strip()}"
            return NOT_CHECKED
        return pgsql.SQL(KNOWN_COLUMN).format(pgsql.Literal(known))

    def add_batch(self, row: dict) -> None:
        """A batch's unknown threads and bytes (storage.INSERT_STORAGE_BATCH's totals)."""
        self.unknown_threads += int(row["unknown_threads"])
        self.unknown_thread_bytes += int(row["unknown_thread_bytes"])


def clear(conn: psycopg.Connection) -> None:
    """Empty the detail tables (in the refresh's transaction, after it locked core_thread_storage)."""
    for sql in CLEAR:
        conn.execute(sql)


def refresh_range(conn: psycopg.Connection, thread_range: pgsql.Composable, orphans: Orphans) -> None:
    """The detail of one range of threads (`thread_range`: a condition on `thread_id`), orphans added up."""
    for sql in (INSERT_CHANNELS, INSERT_GROWTH):
        conn.execute(pgsql.SQL(sql).format(range=thread_range))
    row = conn.execute(pgsql.SQL(SELECT_ORPHANS).format(range=thread_range)).fetchone()
    for name in ("blobs", "blob_bytes", "writes", "write_bytes"):
        setattr(orphans, name, getattr(orphans, name) + int(row[name]))


def record_orphans(conn: psycopg.Connection, orphans: Orphans) -> None:
    """The refresh's orphan totals; the unknown threads' as NULL when no query ran to the end (then the ranges it had
    checked before failing are not listed either: SELECT_UNKNOWN_THREADS)."""
    checked = orphans.checking
    conn.execute(RECORD_ORPHANS, {**orphans.__dict__,
                                  "unknown_threads": orphans.unknown_threads if checked else None,
                                  "unknown_thread_bytes": orphans.unknown_thread_bytes if checked else None})


# --- reads -------------------------------------------------------------------------------------------------------------

SELECT_CHANNEL_TOTALS = """
SELECT channel, sum(blobs) AS blobs, sum(blob_bytes) AS blob_bytes, sum(writes) AS writes,
       sum(write_bytes) AS write_bytes, sum(blob_bytes + write_bytes) AS total_bytes
FROM core_channel_storage GROUP BY channel ORDER BY total_bytes DESC, channel"""
SELECT_GROWING = """
SELECT thread_id, steps, bytes, first_step_bytes, last_step_bytes, slope FROM core_thread_growth
WHERE superlinear ORDER BY slope DESC, thread_id LIMIT %s"""
SELECT_ORPHAN_TOTALS = """
SELECT orphan_blobs AS blobs, orphan_blob_bytes AS blob_bytes, orphan_writes AS writes,
       orphan_write_bytes AS write_bytes, computed_at AS as_of
FROM core_thread_storage_refresh WHERE orphan_blobs IS NOT NULL"""
SELECT_UNKNOWN_TOTALS = """
SELECT unknown_threads AS threads, unknown_thread_bytes AS bytes, unknown_threads_error AS error, computed_at AS as_of
FROM core_thread_storage_refresh"""
SELECT_UNKNOWN_THREADS = """
SELECT thread_id, cliente_id, checkpoints, total_bytes, last_ts FROM core_thread_storage
WHERE known = false AND EXISTS (SELECT 1 FROM core_thread_storage_refresh WHERE unknown_threads IS NOT NULL)
ORDER BY total_bytes DESC, thread_id LIMIT %s"""
THREAD_RANGE = "thread_id = {}"
# PostgreSQL's statistics of the three tables, read now (the collector's counters are themselves approximate).
SELECT_TABLE_STATS = """
SELECT c.relname::text AS table_name, pg_table_size(c.oid) - t.bytes AS table_bytes,
       pg_indexes_size(c.oid) AS index_bytes, t.bytes AS toast_bytes,
       pg_total_relation_size(c.oid) AS total_bytes, s.n_live_tup AS live_tuples, s.n_dead_tup AS dead_tuples,
       s.last_vacuum, s.last_autovacuum, s.last_analyze, s.last_autoanalyze, now() AS as_of
FROM pg_class c
CROSS JOIN LATERAL (SELECT CASE WHEN c.reltoastrelid = 0 THEN 0 ELSE pg_total_relation_size(c.reltoastrelid) END
                    AS bytes) t
LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid
WHERE c.oid IN ('checkpoints'::regclass, 'checkpoint_blobs'::regclass, 'checkpoint_writes'::regclass)
ORDER BY array_position(ARRAY['checkpoints', 'checkpoint_blobs', 'checkpoint_writes'], c.relname::text)"""
CHANNEL_COLUMNS = ["channel", "blobs", "blob_bytes", "writes", "write_bytes", "total_bytes"]
STEP_COLUMNS = ["n", "checkpoint_ns", "checkpoint_id", "step", "checkpoint_bytes", "blob_bytes", "write_bytes",
                "bytes"]


def _ints(frame: pd.DataFrame, skip: tuple[str, ...] = ()) -> pd.DataFrame:
    for column in frame.columns:
        if column.endswith(("bytes", "blobs", "writes", "steps")) and column not in skip:
            frame[column] = frame[column].astype("int64")
    return frame


def channel_totals(db: Database) -> pd.DataFrame:
    """Bytes per channel over every thread (blobs and writes), largest first, as of the last storage refresh."""
    return _ints(pd.DataFrame(db.fetch(SELECT_CHANNEL_TOTALS), columns=CHANNEL_COLUMNS))


def thread_channels(db: Database, thread_id: str) -> pd.DataFrame:
    """Bytes per channel of one thread, read now."""
    with db.connection(read_only=True) as conn:
        rows = conn.execute(pgsql.SQL(SELECT_THREAD_CHANNELS).format(
            range=pgsql.SQL(THREAD_RANGE).format(pgsql.Literal(thread_id)))).fetchall()
    return _ints(pd.DataFrame(rows, columns=CHANNEL_COLUMNS))


def thread_steps(db: Database, thread_id: str) -> pd.DataFrame:
    """One thread's checkpoints in order (`n`), with the bytes each added and the running total (`cumulative`),
    read now."""
    with db.connection(read_only=True) as conn:
        rows = conn.execute(pgsql.SQL(SELECT_STEPS).format(
            range=pgsql.SQL(THREAD_RANGE).format(pgsql.Literal(thread_id)))).fetchall()
    frame = _ints(pd.DataFrame(rows, columns=STEP_COLUMNS))
    frame["cumulative"] = frame["bytes"].cumsum()
    return frame


def growing_threads(db: Database, limit: int = 20) -> pd.DataFrame:
    """Threads whose size grows faster than linearly with their steps, steepest first: steps, bytes, the bytes of
    their first and last step and the slope (bytes per step, per step), as of the last storage refresh."""
    frame = pd.DataFrame(db.fetch(SELECT_GROWING, (limit,)),
                         columns=["thread_id", "steps", "bytes", "first_step_bytes", "last_step_bytes", "slope"])
    frame["slope"] = frame["slope"].astype(float)
    return _ints(frame)


def orphans(db: Database) -> dict | None:
    """Orphan blobs and writes (counts, bytes) as of the last storage refresh (`as_of`); None before one."""
    return db.fetch_one(SELECT_ORPHAN_TOTALS)


def unknown_threads(db: Database) -> dict | None:
    """The threads the application no longer knows (`threads`, their `bytes`) as of the last storage refresh
    (`as_of`): both None when no KNOWN_THREADS_QUERY was configured then, or when it failed (`error`); None before
    any refresh."""
    return db.fetch_one(SELECT_UNKNOWN_TOTALS)


def unknown_thread_list(db: Database, limit: int = 20) -> pd.DataFrame:
    """The largest of those threads (id, customer, checkpoints, bytes, last checkpoint), as of the last refresh."""
    return _ints(pd.DataFrame(db.fetch(SELECT_UNKNOWN_THREADS, (limit,)),
                              columns=["thread_id", "cliente_id", "checkpoints", "total_bytes", "last_ts"]))


def table_stats(db: Database) -> pd.DataFrame:
    """Per checkpoint table: table, index and TOAST bytes, live and dead tuples, last (auto)vacuum and (auto)analyze,
    from PostgreSQL's statistics as of `as_of` (now)."""
    return pd.DataFrame(db.fetch(SELECT_TABLE_STATS), columns=[
        "table_name", "table_bytes", "index_bytes", "toast_bytes", "total_bytes", "live_tuples", "dead_tuples",
        "last_vacuum", "last_autovacuum", "last_analyze", "last_autoanalyze", "as_of"])
