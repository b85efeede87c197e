"""Where the checkpoint bytes go (issue 27), for the Checkpoints page's Storage view: bytes per channel, bytes per step
and the threads that grow faster than linearly, orphans, and PostgreSQL's own table statistics.

The sweep's storage refresh (core/checkpoints/storage.py) keeps `core_channel_storage`, `core_thread_growth` and the
orphan totals in the same batches of thread_id ranges and the same snapshot as `core_thread_storage`; one thread is
also read live. Only keys, sizes and versions are read, never a payload (`octet_length` of a TOASTed value reads its
header)."""
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

CLEAR = ("DELETE FROM core_channel_storage", "DELETE FROM core_thread_growth")
RECORD_ORPHANS = """
UPDATE core_thread_storage_refresh SET orphan_blobs = %(blobs)s, orphan_blob_bytes = %(blob_bytes)s,
       orphan_writes = %(writes)s, orphan_write_bytes = %(write_bytes)s"""


@dataclass
class Orphans:
    blobs: int = 0
    blob_bytes: int = 0
    writes: int = 0
    write_bytes: int = 0


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
    conn.execute(RECORD_ORPHANS, orphans.__dict__)


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


def table_stats(db: Database) -> pd.DataFrame:
    """Per checkpoint table: table, index and TOAST bytes, live and dead tuples, last (auto)vacuum and (auto)analyze,
    from PostgreSQL's statistics as of `as_of` (now)."""
    return pd.DataFrame(db.fetch(SELECT_TABLE_STATS), columns=[
        "table_name", "table_bytes", "index_bytes", "toast_bytes", "total_bytes", "live_tuples", "dead_tuples",
        "last_vacuum", "last_autovacuum", "last_analyze", "last_autoanalyze", "as_of"])
