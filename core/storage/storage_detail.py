"""Where the checkpoint bytes go (issue 27), for the Checkpoints page's Storage view: bytes per channel, bytes per step
and the threads that grow faster than linearly, orphans, and PostgreSQL's own table statistics.

The sweep's storage refresh (core/storage/storage.py) keeps `core_channel_storage`, `core_thread_growth` and the
orphan totals in the same batches of thread_id ranges and the same snapshot as `core_thread_storage`, and, when
`KNOWN_THREADS_QUERY` is configured, which threads the application no longer knows; one thread is also read live.
The detail is recomputed only for the threads whose rows changed since the last refresh (their fingerprint, a sum of
hashes of what the detail reads, kept in core_thread_storage); the orphan totals are sums of per-thread rows.
Only keys, sizes and versions are read, never a payload (`octet_length` of a TOASTed value reads its header)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pandas as pd
import psycopg
from psycopg import sql as pgsql
from psycopg.rows import DictRow

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
INSERT_CHANNELS = (
    CHANNELS
    + """
INSERT INTO core_channel_storage (thread_id, channel, blobs, blob_bytes, writes, write_bytes)
SELECT thread_id, channel, blobs, blob_bytes, writes, write_bytes FROM both_"""
)
SELECT_THREAD_CHANNELS = (
    CHANNELS
    + """
SELECT channel, blobs, blob_bytes, writes, write_bytes, blob_bytes + write_bytes AS total_bytes FROM both_
ORDER BY total_bytes DESC, channel"""
)

# What each checkpoint added, in order: its own row, the blobs of the channels whose version changed since the
# previous checkpoint of its namespace, and its writes. `n` numbers a thread's checkpoints (all namespaces) by id.
# `changed`: one row per checkpoint and (channel, version) pair it changed (one with NULLs when it changed none), each
# checkpoint's channel_versions expanded once; every version a checkpoint references is among them (at the first
# checkpoint of its namespace that references it), so the orphan blobs are read from them too
# (INSERT_GROWTH_AND_ORPHANS). `b`: the blobs' keys and sizes only, read once by a range scan, never their payload.
STEPS = """
WITH b AS MATERIALIZED (
    SELECT thread_id, checkpoint_ns, channel, version, coalesce(octet_length(blob), 0) AS bytes
    FROM checkpoint_blobs WHERE {range}
), c AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, metadata ->> 'step' AS step,
           row_number() OVER (PARTITION BY thread_id ORDER BY checkpoint_id) AS n,
           pg_column_size(checkpoint) + pg_column_size(metadata) AS checkpoint_bytes,
           checkpoint -> 'channel_versions' AS versions,
           lag(checkpoint -> 'channel_versions') OVER (PARTITION BY thread_id, checkpoint_ns ORDER BY checkpoint_id)
               AS previous
    FROM checkpoints WHERE {range}
), changed AS MATERIALIZED (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.step, c.n, c.checkpoint_bytes, e.channel, e.version
    FROM c LEFT JOIN LATERAL (
        SELECT x.channel, x.version FROM jsonb_each_text(coalesce(c.versions, '{{}}')) AS x(channel, version)
        WHERE c.previous ->> x.channel IS DISTINCT FROM x.version) e ON true
), w AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, sum(coalesce(octet_length(blob), 0)) AS bytes
    FROM checkpoint_writes WHERE {range} GROUP BY 1, 2, 3
), steps AS (
    SELECT s.thread_id, s.checkpoint_ns, s.checkpoint_id, s.step, s.n, s.checkpoint_bytes, s.blob_bytes,
           coalesce(w.bytes, 0) AS write_bytes
    FROM (SELECT thread_id, checkpoint_ns, checkpoint_id, step, n, checkpoint_bytes,
                 coalesce(sum(b.bytes), 0) AS blob_bytes
          FROM changed LEFT JOIN b USING (thread_id, checkpoint_ns, channel, version)
          GROUP BY 1, 2, 3, 4, 5, 6) s
    LEFT JOIN w USING (thread_id, checkpoint_ns, checkpoint_id)
)"""
MIN_STEPS = 5  # fewer steps say nothing about a thread's growth
# The growth of each thread, and its orphans: blobs whose (thread, namespace, channel, version) no checkpoint
# references, writes whose checkpoint is not there (only threads that have any get a row).
GROWTH_ROWS = f"""
    SELECT thread_id, count(*), sum(bytes), (array_agg(bytes ORDER BY n))[1], (array_agg(bytes ORDER BY n DESC))[1],
           regr_slope(bytes, n),
           coalesce(count(*) >= {MIN_STEPS} AND regr_slope(bytes, n) * count(*) > avg(bytes), false)
    FROM (SELECT thread_id, n, checkpoint_bytes + blob_bytes + write_bytes AS bytes FROM steps) s
    GROUP BY thread_id"""
GROWTH_COLUMNS = "thread_id, steps, bytes, first_step_bytes, last_step_bytes, slope, superlinear"
ORPHANS = """orphan_blobs AS (
    SELECT thread_id, count(*) AS blobs, sum(bytes) AS blob_bytes
    FROM b
    WHERE NOT EXISTS (SELECT 1 FROM changed r WHERE r.thread_id = b.thread_id AND r.checkpoint_ns = b.checkpoint_ns
                      AND r.channel = b.channel AND r.version = b.version)
    GROUP BY thread_id
), orphan_writes AS (
    SELECT thread_id, count(*) AS writes, sum(coalesce(octet_length(cw.blob), 0)) AS write_bytes
    FROM checkpoint_writes cw
    WHERE {range} AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = cw.thread_id
                                    AND c.checkpoint_ns = cw.checkpoint_ns AND c.checkpoint_id = cw.checkpoint_id)
    GROUP BY thread_id
)"""
ORPHAN_COLUMNS = "thread_id, blobs, blob_bytes, writes, write_bytes"
ORPHAN_ROWS = """
SELECT thread_id, coalesce(ob.blobs, 0), coalesce(ob.blob_bytes, 0), coalesce(ow.writes, 0), coalesce(ow.write_bytes, 0)
FROM orphan_blobs ob FULL JOIN orphan_writes ow USING (thread_id)"""
INSERT_GROWTH_AND_ORPHANS = (
    STEPS
    + """, growth AS (
    INSERT INTO core_thread_growth ("""
    + GROWTH_COLUMNS
    + ")"
    + GROWTH_ROWS
    + "\n), "
    + ORPHANS
    + "\nINSERT INTO core_thread_orphans ("
    + ORPHAN_COLUMNS
    + ")"
    + ORPHAN_ROWS
)
# Where our database is apart (issue 52): the same rows computed on the agents' side in the refresh's snapshot and
# returned as JSON, then inserted in ours (json_populate_recordset over the table's own row type).
SELECT_CHANNEL_ROWS = (
    CHANNELS
    + """
SELECT coalesce(json_agg(both_), '[]')::text AS rows FROM both_"""
)
SELECT_GROWTH_AND_ORPHAN_ROWS = (
    STEPS
    + ", growth ("
    + GROWTH_COLUMNS
    + ") AS ("
    + GROWTH_ROWS
    + "\n), "
    + ORPHANS
    + ", orphans ("
    + ORPHAN_COLUMNS
    + ") AS ("
    + ORPHAN_ROWS
    + """
)
SELECT (SELECT coalesce(json_agg(growth), '[]') FROM growth)::text AS growth,
       (SELECT coalesce(json_agg(orphans), '[]') FROM orphans)::text AS orphans"""
)
INSERT_ROWS = "INSERT INTO {table} ({columns}) SELECT {columns} FROM json_populate_recordset(NULL::{table}, %s::json)"
CHANNEL_COLUMNS_SQL = "thread_id, channel, blobs, blob_bytes, writes, write_bytes"
SELECT_STEPS = (
    STEPS
    + """
SELECT n, checkpoint_ns, checkpoint_id, step, checkpoint_bytes, blob_bytes, write_bytes,
       checkpoint_bytes + blob_bytes + write_bytes AS bytes
FROM steps ORDER BY n"""
)

# What each detail row is computed from, per row of the three tables: a 64-bit hash of its keys and sizes (and of a
# checkpoint's channel_versions), seeded by the detail's own SQL (DETAIL_SEEDS). Their sum per thread is the thread's
# fingerprint (storage.INSERT_STORAGE_BATCH): a thread whose fingerprint did not change since the last refresh keeps
# its detail rows. Every column hashed is NOT NULL in langgraph's schema (a NULL would drop the row from the sum).
CHECKPOINT_HASH = """hashint8extended((pg_column_size(checkpoint) + pg_column_size(metadata))::bigint,
                 hashtextextended(checkpoint_id, hashtextextended(checkpoint_ns,
                 jsonb_hash_extended(coalesce(checkpoint -> 'channel_versions', 'null'), {seed}))))"""
BLOB_HASH = """hashint8extended(coalesce(octet_length(blob), -1)::bigint, hashtextextended(version,
           hashtextextended(channel, hashtextextended(checkpoint_ns, {seed}))))"""
WRITE_HASH = """hashint8extended(coalesce(octet_length(blob), -1)::bigint, hashtextextended(channel,
            hashint4extended(idx, hashtextextended(task_id, hashtextextended(checkpoint_id,
            hashtextextended(checkpoint_ns, {seed}))))))"""

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

DETAIL_TABLES = ("core_channel_storage", "core_thread_growth", "core_thread_orphans")
# In one range, after its summary rows were replaced: the detail of the changed threads and of threads no longer there
# (`{summary_range}`: the range on s.thread_id, so that even a hashed subplan reads only the range's summary rows).
DELETE_DETAIL = """
DELETE FROM {table} d WHERE {range} AND (d.thread_id = ANY({changed}::text[])
    OR NOT EXISTS (SELECT 1 FROM core_thread_storage s WHERE {summary_range} AND s.thread_id = d.thread_id))"""
CHANGED = "thread_id = ANY({}::text[])"
DETAIL_SEEDS = tuple(
    int.from_bytes(
        hashlib.sha256(
            "\n".join(
                (CHANNELS, INSERT_CHANNELS, INSERT_GROWTH_AND_ORPHANS, CHECKPOINT_HASH, BLOB_HASH, WRITE_HASH)
            ).encode()
        ).digest()[i : i + 8],
        "big",
        signed=True,
    )
    for i in (0, 8, 16)
)  # checkpoints, blobs, writes
HASHES = {
    name: pgsql.SQL(sql).format(seed=pgsql.Literal(seed))
    for name, sql, seed in zip(
        ("checkpoint_hash", "blob_hash", "write_hash"),
        (CHECKPOINT_HASH, BLOB_HASH, WRITE_HASH),
        DETAIL_SEEDS,
        strict=True,
    )
}
# The refresh's orphan totals: sums of the per-thread rows.
RECORD_ORPHANS = """
UPDATE core_thread_storage_refresh SET (orphan_blobs, orphan_blob_bytes, orphan_writes, orphan_write_bytes) = (
           SELECT coalesce(sum(blobs), 0), coalesce(sum(blob_bytes), 0), coalesce(sum(writes), 0),
                  coalesce(sum(write_bytes), 0) FROM core_thread_orphans),
       unknown_threads = %(unknown_threads)s, unknown_thread_bytes = %(unknown_thread_bytes)s,
       unknown_threads_error = %(unknown_threads_error)s"""


class KnownThreadsQueryError(ValueError):
    """KNOWN_THREADS_QUERY is unusable as configured (says why)."""


def known_threads_query(query: str | None) -> str | None:
    """The configured query ready to wrap (trailing `;` removed), None when none is configured;
    KnownThreadsQueryError for a per-customer query."""
    query = (query or "").strip().rstrip(";").strip()
    if "%(id)s" in query:
        raise KnownThreadsQueryError(
            "KNOWN_THREADS_QUERY lists every thread the application knows and takes no "
            "%(id)s (a query for one customer is SUBJECT_THREAD_QUERY)"
        )
    return query or None


@dataclass
class Orphans:
    """The refresh's threads the application no longer knows, added up batch by batch. `known_query`:
    KNOWN_THREADS_QUERY (None: nothing can tell which threads the application no longer knows);
    `unknown_threads_error`: why it could not run."""

    known_query: str | None = None
    unknown_threads: int = 0
    unknown_thread_bytes: int = 0
    unknown_threads_error: str | None = None

    @classmethod
    def configured(cls, query: str | None) -> Orphans:
        try:
            return cls(known_query=known_threads_query(query))
        except KnownThreadsQueryError as exc:
            return cls(known_query=query, unknown_threads_error=str(exc))

    @property
    def checking(self) -> bool:
        return self.known_query is not None and self.unknown_threads_error is None

    def known_column(self, conn: psycopg.Connection[DictRow], known_range: pgsql.Composable) -> pgsql.Composable:
        """The `known` value of a batch's threads for its INSERT: whether the query returns each (NULL when nothing
        checks); `known_range`: the batch's range on `(q.thread_id)::text`. A failure of the query is kept in
        `unknown_threads_error`."""
        if not self.checking or self.known_query is None:  # (checking says the query is there)
            return NOT_CHECKED
        query = pgsql.SQL(SELECT_KNOWN).format(query=pgsql.SQL(self.known_query), range=known_range)
        try:
            with conn.transaction(force_rollback=True):  # a savepoint: READ ONLY and the timeout end with it
                conn.execute("SET TRANSACTION READ ONLY")
                conn.execute(
                    pgsql.SQL("SET LOCAL statement_timeout = {}").format(pgsql.Literal(KNOWN_QUERY_TIMEOUT_MS))
                )
                known = [r["thread_id"] for r in conn.execute(query, prepare=False)]
        except psycopg.Error as exc:  # shown on the page, never hidden
            self.unknown_threads_error = f"KNOWN_THREADS_QUERY: {type(exc).__name__}: {str(exc).strip()}"
            return NOT_CHECKED
        return pgsql.SQL(KNOWN_COLUMN).format(pgsql.Literal(known))

    def add_batch(self, row: dict) -> None:
        """A batch's unknown threads and bytes (storage.INSERT_STORAGE_BATCH's totals)."""
        self.unknown_threads += int(row["unknown_threads"])
        self.unknown_thread_bytes += int(row["unknown_thread_bytes"])


def refresh_range(
    conn: psycopg.Connection[DictRow],
    thread_range: pgsql.Composable,
    summary_range: pgsql.Composable,
    changed: list[str],
    every: bool,
    ours: psycopg.Connection[DictRow] | None = None,
) -> None:
    """The detail of one range of threads (`thread_range`: a condition on `thread_id`, `summary_range` the same on
    `s.thread_id`) whose summary rows were just replaced: that of the `changed` threads recomputed (`every`: they are
    all the range's threads), that of threads no longer there deleted, the others' kept. `ours`: our database's
    connection when it is apart from `conn`'s (issue 52): the rows are read on `conn` and written there."""
    mine = conn if ours is None else ours
    ids = pgsql.Literal(changed)
    for table in DETAIL_TABLES:
        mine.execute(
            pgsql.SQL(DELETE_DETAIL).format(
                table=pgsql.Identifier(table), range=thread_range, summary_range=summary_range, changed=ids
            )
        )
    if not changed:
        return
    threads = thread_range if every else pgsql.SQL(CHANGED).format(ids)
    if mine is conn:
        for sql in (INSERT_CHANNELS, INSERT_GROWTH_AND_ORPHANS):
            conn.execute(pgsql.SQL(sql).format(range=threads), prepare=False)
        return
    channels = conn.execute(pgsql.SQL(SELECT_CHANNEL_ROWS).format(range=threads), prepare=False).fetchone()
    steps = conn.execute(pgsql.SQL(SELECT_GROWTH_AND_ORPHAN_ROWS).format(range=threads), prepare=False).fetchone()
    assert channels is not None and steps is not None
    for table, columns, rows in (
        ("core_channel_storage", CHANNEL_COLUMNS_SQL, channels["rows"]),
        ("core_thread_growth", GROWTH_COLUMNS, steps["growth"]),
        ("core_thread_orphans", ORPHAN_COLUMNS, steps["orphans"]),
    ):
        query = pgsql.SQL(INSERT_ROWS).format(table=pgsql.Identifier(table), columns=pgsql.SQL(columns))
        mine.execute(query, (rows,), prepare=False)


def record_orphans(conn: psycopg.Connection[DictRow], orphans: Orphans) -> None:
    """The refresh's orphan totals (sums of core_thread_orphans); the unknown threads' as NULL when no query ran to the
    end (then the ranges it had checked before failing are not listed either: SELECT_UNKNOWN_THREADS)."""
    checked = orphans.checking
    conn.execute(
        RECORD_ORPHANS,
        {
            "unknown_threads": orphans.unknown_threads if checked else None,
            "unknown_thread_bytes": orphans.unknown_thread_bytes if checked else None,
            "unknown_threads_error": orphans.unknown_threads_error,
        },
    )


# --- reads
# -------------------------------------------------------------------------------------------------------------

SELECT_CHANNEL_TOTALS = """
SELECT channel, sum(blobs) AS blobs, sum(blob_bytes) AS blob_bytes, sum(writes) AS writes,
       sum(write_bytes) AS write_bytes, sum(blob_bytes + write_bytes) AS total_bytes
FROM core_channel_storage GROUP BY channel ORDER BY total_bytes DESC, channel"""
SELECT_GROWING = """
SELECT thread_id, steps, bytes, first_step_bytes, last_step_bytes, slope FROM core_thread_growth
WHERE superlinear ORDER BY slope DESC, thread_id LIMIT %s"""
# The sweep run that made the storage refresh `r` (migration 142): its id and logged start, which the pages name as
# the figures' time (NULL: refreshed outside a sweep).
SWEEP_RUN_COLUMNS = """r.sweep_run_id,
       (SELECT l.started_at FROM core_sweep_log l WHERE l.id = r.sweep_run_id) AS sweep_started_at"""
SELECT_ORPHAN_TOTALS = f"""
SELECT orphan_blobs AS blobs, orphan_blob_bytes AS blob_bytes, orphan_writes AS writes,
       orphan_write_bytes AS write_bytes, computed_at AS as_of, {SWEEP_RUN_COLUMNS}
FROM core_thread_storage_refresh r WHERE orphan_blobs IS NOT NULL"""
SELECT_UNKNOWN_TOTALS = f"""
SELECT unknown_threads AS threads, unknown_thread_bytes AS bytes, unknown_threads_error AS error, computed_at AS as_of,
       {SWEEP_RUN_COLUMNS}
FROM core_thread_storage_refresh r"""
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
STEP_COLUMNS = ["n", "checkpoint_ns", "checkpoint_id", "step", "checkpoint_bytes", "blob_bytes", "write_bytes", "bytes"]


def _ints(frame: pd.DataFrame, skip: tuple[str, ...] = ()) -> pd.DataFrame:
    for column in frame.columns:
        if column.endswith(("bytes", "blobs", "writes", "steps")) and column not in skip:
            frame[column] = frame[column].astype("int64")
    return frame


def channel_totals(db: Database) -> pd.DataFrame:
    """Bytes per channel over every thread (blobs and writes), largest first, as of the last storage refresh."""
    return _ints(pd.DataFrame(db.ours.fetch(SELECT_CHANNEL_TOTALS), columns=CHANNEL_COLUMNS))


def thread_channels(db: Database, thread_id: str) -> pd.DataFrame:
    """Bytes per channel of one thread, read now."""
    with db.connection(read_only=True) as conn:
        rows = conn.execute(
            pgsql.SQL(SELECT_THREAD_CHANNELS).format(range=pgsql.SQL(THREAD_RANGE).format(pgsql.Literal(thread_id)))
        ).fetchall()
    return _ints(pd.DataFrame(rows, columns=CHANNEL_COLUMNS))


def thread_steps(db: Database, thread_id: str) -> pd.DataFrame:
    """One thread's checkpoints in order (`n`), with the bytes each added and the running total (`cumulative`),
    read now."""
    with db.connection(read_only=True) as conn:
        rows = conn.execute(
            pgsql.SQL(SELECT_STEPS).format(range=pgsql.SQL(THREAD_RANGE).format(pgsql.Literal(thread_id)))
        ).fetchall()
    frame = _ints(pd.DataFrame(rows, columns=STEP_COLUMNS))
    frame["cumulative"] = frame["bytes"].cumsum()
    return frame


def growing_threads(db: Database, limit: int = 20) -> pd.DataFrame:
    """Threads whose size grows faster than linearly with their steps, steepest first: steps, bytes, the bytes of
    their first and last step and the slope (bytes per step, per step), as of the last storage refresh."""
    frame = pd.DataFrame(
        db.ours.fetch(SELECT_GROWING, (limit,)),
        columns=["thread_id", "steps", "bytes", "first_step_bytes", "last_step_bytes", "slope"],
    )
    frame["slope"] = frame["slope"].astype(float)
    return _ints(frame)


def orphans(db: Database) -> dict | None:
    """Orphan blobs and writes (counts, bytes) as of the last storage refresh (`as_of`); None before one."""
    return db.ours.fetch_one(SELECT_ORPHAN_TOTALS)


def unknown_threads(db: Database) -> dict | None:
    """The threads the application no longer knows (`threads`, their `bytes`) as of the last storage refresh
    (`as_of`): both None when no KNOWN_THREADS_QUERY was configured then, or when it failed (`error`); None before
    any refresh."""
    return db.ours.fetch_one(SELECT_UNKNOWN_TOTALS)


def unknown_thread_list(db: Database, limit: int = 20) -> pd.DataFrame:
    """The largest of those threads (id, customer, checkpoints, bytes, last checkpoint), as of the last refresh."""
    return _ints(
        pd.DataFrame(
            db.ours.fetch(SELECT_UNKNOWN_THREADS, (limit,)),
            columns=["thread_id", "cliente_id", "checkpoints", "total_bytes", "last_ts"],
        )
    )


def table_stats(db: Database) -> pd.DataFrame:
    """Per checkpoint table: table, index and TOAST bytes, live and dead tuples, last (auto)vacuum and (auto)analyze,
    from PostgreSQL's statistics as of `as_of` (now)."""
    return pd.DataFrame(
        db.fetch(SELECT_TABLE_STATS),
        columns=[
            "table_name",
            "table_bytes",
            "index_bytes",
            "toast_bytes",
            "total_bytes",
            "live_tuples",
            "dead_tuples",
            "last_vacuum",
            "last_autovacuum",
            "last_analyze",
            "last_autoanalyze",
            "as_of",
        ],
    )
