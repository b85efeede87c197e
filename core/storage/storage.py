"""What the checkpoint tables weigh, for the Checkpoints page's Storage view: `core_thread_storage` (one row per
thread) refreshed by the sweep job, and the three tables' rows as of that refresh.

The refresh runs in batches of thread_id key ranges inside one REPEATABLE READ transaction (issue 14): the single
GROUP BY thread_id over the three tables (core.history.views.LIVE_THREAD_STORAGE) needed more than 3 GB of
temp space at 10M checkpoint writes / 1M threads. A batch holds at most `batch_rows` rows of each table (plus the
rest of its last thread), so temp space and memory are bounded by the batch, not by the number of threads.
Every thread's row is recomputed at every refresh; the detail of issue 27 (core/storage/storage_detail.py, 9x the
cost of the rows at 1M) only for the threads whose rows changed since the last refresh (their fingerprint).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast

import pandas as pd
import psycopg
from psycopg import sql as pgsql
from psycopg.rows import DictRow

from core.db import Database, dashboard_dsn_of, one
from core.privacy import ours as ours_db
from core.storage import storage_detail

# The refresh, in batches of thread_id key ranges (lo, hi] (issue 14): each of the three tables' primary keys
# starts with thread_id, so a range is an index range scan of each table, and a batch holds at most
# `batch_rows` rows of each table plus the rest of its last thread. Temp space and memory are bounded by the
# batch, not by the number of threads. Every batch runs in one REPEATABLE READ transaction: one snapshot, so
# the rows are exactly those of the single statement above at that snapshot (concurrent writes included or
# not as a whole), and readers see the old rows until it commits.
STORAGE_BATCH_ROWS = 20_000  # at 1M: 20k rows sorted in memory (0 temp), 50k spilled 2.8 MB a batch; 4.6 s vs 5.3 s

# The batch's upper bound: the smallest of the three tables' thread_id `batch_rows` rows past `lo`; NULL when
# every table has fewer rows left (the last batch).
SELECT_BATCH_END = """
SELECT least((SELECT thread_id FROM checkpoints WHERE {after} ORDER BY thread_id OFFSET %(skip)s LIMIT 1),
             (SELECT thread_id FROM checkpoint_blobs WHERE {after} ORDER BY thread_id OFFSET %(skip)s LIMIT 1),
             (SELECT thread_id FROM checkpoint_writes WHERE {after} ORDER BY thread_id OFFSET %(skip)s LIMIT 1)) AS
             hi"""

# LIVE_THREAD_STORAGE restricted to one range, plus the configured subject metadata keys the thread's
# checkpoints carry (`{flags}`: `metadata ? 'k' AS k0, ...`; `{keys}`: an array of `CASE WHEN bool_or(k0) THEN
# 'k' END`; literals so the planner sees the key), `{known}`: whether KNOWN_THREADS_QUERY returns the thread
# (storage_detail.Orphans.known_column), and the thread's fingerprint: the sum of a hash of each of its rows over
# what the detail reads (storage_detail.CHECKPOINT_HASH, ...), so that a thread whose fingerprint did not change keeps
# its detail. Each table's sizes are computed in a subquery the planner keeps (OFFSET 0) before any sort or hash on
# thread_id, so those handle narrow rows, not whole payloads (a batch of 37k checkpoints sorted with their jsonb
# spilled 40 MB at 1M). The range's old rows, deleted first (DELETE_STORAGE_RANGE: their thread ids and fingerprints,
# `{old_threads}` and `{old_fingerprints}` here), are replaced. Returns the batch's threads, rows per table, unknown
# threads, and `changed`: the threads whose fingerprint is new or differs from their old row's (all when `{full}`).
DELETE_STORAGE_RANGE = """
WITH old AS (DELETE FROM core_thread_storage WHERE {range} RETURNING thread_id, fingerprint)
SELECT coalesce(array_agg(thread_id), '{{}}') AS threads, coalesce(array_agg(fingerprint), '{{}}') AS fingerprints
FROM old"""
# The batch's three per-table aggregates, then its rows (`BATCH_ROWS`: the columns of core_thread_storage, in order).
BATCH_AGGREGATES = """
WITH c AS (
    SELECT thread_id, count(*) AS checkpoints, sum(bytes) AS checkpoint_bytes, max(cliente_id) AS cliente_id,
           max(ts) AS last_ts, array_remove({keys}, NULL) AS metadata_keys, sum(fp) AS fp
    FROM (SELECT thread_id, pg_column_size(checkpoint) + pg_column_size(metadata) AS bytes,
                 metadata ->> 'cliente_id' AS cliente_id, checkpoint ->> 'ts' AS ts{flags},
                 {checkpoint_hash} AS fp
          FROM checkpoints WHERE {range} OFFSET 0) x
    GROUP BY thread_id
), b AS (
    SELECT thread_id, count(*) AS blobs, sum(coalesce(bytes, 0)) AS blob_bytes, sum(fp) AS fp
    FROM (SELECT thread_id, octet_length(blob) AS bytes, {blob_hash} AS fp FROM checkpoint_blobs WHERE {range}
    OFFSET 0) x
    GROUP BY thread_id
), w AS (
    SELECT thread_id, count(*) AS writes, sum(bytes) AS write_bytes, sum(fp) AS fp
    FROM (SELECT thread_id, octet_length(blob) AS bytes, {write_hash} AS fp FROM checkpoint_writes WHERE {range}
          OFFSET 0) x
    GROUP BY thread_id
)"""
STORAGE_COLUMNS = """thread_id, cliente_id, checkpoints, checkpoint_bytes, blobs, blob_bytes, writes,
                                     write_bytes, total_bytes, last_ts, metadata_keys, known, fingerprint"""
BATCH_ROWS = """
    SELECT coalesce(c.thread_id, b.thread_id, w.thread_id), c.cliente_id,
           coalesce(c.checkpoints, 0), coalesce(c.checkpoint_bytes, 0),
           coalesce(b.blobs, 0), coalesce(b.blob_bytes, 0),
           coalesce(w.writes, 0), coalesce(w.write_bytes, 0),
           coalesce(c.checkpoint_bytes, 0) + coalesce(b.blob_bytes, 0) + coalesce(w.write_bytes, 0),
           core_try_timestamptz(c.last_ts), coalesce(c.metadata_keys, '{{}}'), {known},
           coalesce(c.fp, 0) + coalesce(b.fp, 0) + coalesce(w.fp, 0)
    FROM c FULL JOIN b USING (thread_id) FULL JOIN w USING (thread_id)"""
OLD_ROWS = """old AS (
    SELECT * FROM unnest({old_threads}::text[], {old_fingerprints}::numeric[]) AS o(thread_id, fingerprint)
)"""
INSERTED_TOTALS = """
    RETURNING thread_id, checkpoints, blobs, writes, total_bytes, known, fingerprint
)
SELECT count(*) AS threads, coalesce(sum(checkpoints), 0) AS checkpoints, coalesce(sum(blobs), 0) AS blobs,
       coalesce(sum(writes), 0) AS writes, count(*) FILTER (WHERE NOT known) AS unknown_threads,
       coalesce(sum(total_bytes) FILTER (WHERE NOT known), 0) AS unknown_thread_bytes,
       coalesce(array_agg(ins.thread_id) FILTER (WHERE {full} OR old.fingerprint IS DISTINCT FROM ins.fingerprint),
                '{{}}') AS changed
FROM ins LEFT JOIN old USING (thread_id)"""
INSERT_STORAGE_BATCH = (
    BATCH_AGGREGATES
    + ", "
    + OLD_ROWS
    + """, ins AS (
    INSERT INTO core_thread_storage ("""
    + STORAGE_COLUMNS
    + ")"
    + BATCH_ROWS
    + INSERTED_TOTALS
)
# Where our database is apart (issue 52): the batch's rows computed on the agents' side in the refresh's READ ONLY
# snapshot and returned as JSON (SELECT_STORAGE_ROWS), then the range's old rows replaced in ours by them
# (DELETE_STORAGE_RANGE, INSERT_STORAGE_ROWS: the same totals and `changed` as INSERT_STORAGE_BATCH's).
SELECT_STORAGE_ROWS = (
    BATCH_AGGREGATES
    + ", r ("
    + STORAGE_COLUMNS
    + ") AS ("
    + BATCH_ROWS
    + """
)
SELECT coalesce(json_agg(r), '[]')::text AS rows FROM r"""
)
INSERT_STORAGE_ROWS = (
    "WITH "
    + OLD_ROWS
    + """, ins AS (
    INSERT INTO core_thread_storage ("""
    + STORAGE_COLUMNS
    + ")\n    SELECT "
    + STORAGE_COLUMNS
    + "\n    FROM json_populate_recordset(NULL::core_thread_storage, %(rows)s::json)"
    + INSERTED_TOTALS
)

UPSERT_STORAGE_REFRESH = """
INSERT INTO core_thread_storage_refresh AS r (metadata_keys, threads, checkpoints, blobs, writes, batches, batch_rows,
                                              seconds, sweep_run_id)
VALUES (%(keys)s, %(threads)s, %(checkpoints)s, %(blobs)s, %(writes)s, %(batches)s, %(batch_rows)s,
        extract(epoch FROM clock_timestamp() - now()), %(sweep_run)s)
ON CONFLICT (singleton) DO UPDATE SET computed_at = now(), metadata_keys = EXCLUDED.metadata_keys,
    threads = EXCLUDED.threads, checkpoints = EXCLUDED.checkpoints, blobs = EXCLUDED.blobs, writes = EXCLUDED.writes,
    batches = EXCLUDED.batches, batch_rows = EXCLUDED.batch_rows, seconds = EXCLUDED.seconds,
    sweep_run_id = EXCLUDED.sweep_run_id"""

REFRESH_THREAD_STORAGE = [
    "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",  # one snapshot for every batch
    "SET LOCAL plan_cache_mode = force_custom_plan",  # each range planned with its bounds, never generically
    # One refresh at a time; readers go on. LOCK takes no snapshot: a refresh that waited here reads the rows of the
    # one it waited for, and recomputes the detail only of threads changed since.
    "LOCK TABLE core_thread_storage IN EXCLUSIVE MODE",
]

# Exact counts now (three full counts: 3.8 s at 10M): only when no refresh has kept them yet.
SELECT_TABLE_TOTALS = """
SELECT t.name AS table_name, t.rows, pg_total_relation_size(t.name::regclass) AS total_bytes, now() AS sized_at
FROM (VALUES ('checkpoints', (SELECT count(*) FROM checkpoints)),
             ('checkpoint_blobs', (SELECT count(*) FROM checkpoint_blobs)),
             ('checkpoint_writes', (SELECT count(*) FROM checkpoint_writes))) AS t(name, rows)"""
# The rows as of the last refresh (exact at its snapshot), the sizes now.
SELECT_KEPT_TABLE_TOTALS = f"""
SELECT t.name AS table_name, t.rows, pg_total_relation_size(t.name::regclass) AS total_bytes, now() AS sized_at,
       r.computed_at AS as_of, {storage_detail.SWEEP_RUN_COLUMNS}
FROM core_thread_storage_refresh r
CROSS JOIN LATERAL (VALUES ('checkpoints', r.checkpoints), ('checkpoint_blobs', r.blobs),
                           ('checkpoint_writes', r.writes)) AS t(name, rows)
ORDER BY array_position(ARRAY['checkpoints', 'checkpoint_blobs', 'checkpoint_writes'], t.name)"""
# The same where our database is apart (issue 52): the kept rows in ours, the sizes now on the agents' side.
SELECT_KEPT_TABLE_ROWS = f"""
SELECT t.name AS table_name, t.rows, r.computed_at AS as_of, {storage_detail.SWEEP_RUN_COLUMNS}
FROM core_thread_storage_refresh r
CROSS JOIN LATERAL (VALUES ('checkpoints', r.checkpoints), ('checkpoint_blobs', r.blobs),
                           ('checkpoint_writes', r.writes)) AS t(name, rows)
ORDER BY array_position(ARRAY['checkpoints', 'checkpoint_blobs', 'checkpoint_writes'], t.name)"""
SELECT_TABLE_SIZES = """
SELECT t.name AS table_name, pg_total_relation_size(t.name::regclass) AS total_bytes, now() AS sized_at
FROM unnest(ARRAY['checkpoints', 'checkpoint_blobs', 'checkpoint_writes']) AS t(name)"""
TOTALS_COLUMNS = ["table_name", "rows", "total_bytes", "sized_at", "as_of", "sweep_run_id", "sweep_started_at"]
SELECT_STORAGE_REFRESH = f"SELECT r.*, {storage_detail.SWEEP_RUN_COLUMNS} FROM core_thread_storage_refresh r"


def _key_flags(keys: tuple[str, ...]) -> tuple[pgsql.Composable, pgsql.Composable]:
    """(`, metadata ? 'k' AS k0, ...`, `ARRAY[CASE WHEN bool_or(k0) THEN 'k' END, ...]::text[]`)."""
    if not keys:
        return pgsql.SQL(""), pgsql.SQL("ARRAY[]::text[]")
    flags = pgsql.SQL("").join(
        pgsql.SQL(", metadata ? {k} AS {c}").format(k=pgsql.Literal(k), c=pgsql.Identifier(f"k{i}"))
        for i, k in enumerate(keys)
    )
    array = pgsql.SQL("ARRAY[{}]::text[]").format(
        pgsql.SQL(", ").join(
            pgsql.SQL("CASE WHEN bool_or({c}) THEN {k} END").format(k=pgsql.Literal(k), c=pgsql.Identifier(f"k{i}"))
            for i, k in enumerate(keys)
        )
    )
    return flags, array


def key_ranges(lo: str | None, hi: str | None, column: str = "thread_id") -> pgsql.Composable:
    """`column` in (lo, hi]; None is unbounded on that side."""
    parts = []
    if lo is not None:
        parts.append(pgsql.SQL("{} > {}").format(pgsql.SQL(column), pgsql.Literal(lo)))
    if hi is not None:
        parts.append(pgsql.SQL("{} <= {}").format(pgsql.SQL(column), pgsql.Literal(hi)))
    return pgsql.SQL(" AND ").join(parts) if parts else pgsql.SQL("true")


def thread_ranges(
    conn: psycopg.Connection[DictRow], batch_end: str, skip: int
) -> Iterator[tuple[str | None, str | None]]:
    """(lo, hi] ranges of thread_id, in order, covering every thread: `batch_end` (with `{after}` for the range
    past lo, `%(skip)s` for skip) gives hi, the thread `skip` rows on; none or NULL: this is the last range."""
    lo: str | None = None
    while True:
        row = conn.execute(pgsql.SQL(batch_end).format(after=key_ranges(lo, None)), {"skip": skip}).fetchone()
        hi = None if row is None else row["hi"]
        yield lo, hi
        if hi is None:
            return
        lo = hi


def default_metadata_keys() -> tuple[str, ...]:
    from core.config import load_settings

    return tuple(load_settings().subject_metadata_keys)


FROM_SETTINGS = object()  # refresh_thread_storage's default KNOWN_THREADS_QUERY: the configured one


@dataclass(frozen=True)
class StorageRefresh:
    """What a refresh wrote: threads, the three tables' rows at its snapshot, how many batches."""

    threads: int
    checkpoints: int
    blobs: int
    writes: int
    batches: int
    metadata_keys: tuple[str, ...]
    detailed: int  # threads whose detail (bytes per channel and step, orphans) was recomputed


def refresh_storage_conn(
    conn: psycopg.Connection[DictRow],
    metadata_keys: tuple[str, ...],
    batch_rows: int = STORAGE_BATCH_ROWS,
    on_batch: Callable[[int, str | None], None] | None = None,
    known_query: str | None = None,
    full: bool = False,
    sweep_run: int | None = None,
) -> StorageRefresh:
    """The refresh on `conn` (dict rows; inside a transaction the caller opened and commits, before any other
    statement of it: the first one sets its isolation level). `on_batch(n, hi)` is called after batch n (from 1),
    `hi` its upper bound (None for the last). `known_query`: KNOWN_THREADS_QUERY, run per batch on its range.
    Every thread's summary row is recomputed; its detail only when its rows changed since the last refresh (its
    fingerprint), or for every thread when `full`. `sweep_run`: the sweep run refreshing it (None: none), which the
    pages name as the figures' time."""
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
    if dashboard_dsn_of(conn) is not None:
        with ours_db.connect(conn) as mine:
            return _refresh_apart(conn, mine, metadata_keys, batch_rows, on_batch, known_query, full, sweep_run)
    for sql in REFRESH_THREAD_STORAGE:
        conn.execute(sql)
    flags, keys = _key_flags(metadata_keys)
    totals = {"threads": 0, "checkpoints": 0, "blobs": 0, "writes": 0}
    orphans = storage_detail.Orphans.configured(known_query)
    batches = detailed = 0
    for lo, hi in thread_ranges(conn, SELECT_BATCH_END, batch_rows - 1):
        thread_range = key_ranges(lo, hi)
        known = orphans.known_column(conn, key_ranges(lo, hi, storage_detail.KNOWN_RANGE))
        old = one(conn.execute(pgsql.SQL(DELETE_STORAGE_RANGE).format(range=thread_range), prepare=False).fetchone())
        row = one(
            conn.execute(
                pgsql.SQL(INSERT_STORAGE_BATCH).format(
                    flags=flags,
                    keys=keys,
                    range=thread_range,
                    known=known,
                    full=pgsql.Literal(full),
                    old_threads=pgsql.Literal(old["threads"]),
                    old_fingerprints=pgsql.Literal(old["fingerprints"]),
                    **storage_detail.HASHES,
                ),
                prepare=False,
            ).fetchone()
        )
        orphans.add_batch(row)
        storage_detail.refresh_range(
            conn, thread_range, key_ranges(lo, hi, "s.thread_id"), row["changed"], len(row["changed"]) == row["threads"]
        )
        batches += 1
        detailed += len(row["changed"])
        for k in totals:
            totals[k] += int(row[k])
        if on_batch is not None:
            on_batch(batches, hi)
    conn.execute(
        UPSERT_STORAGE_REFRESH,
        {
            "keys": list(metadata_keys),
            **totals,
            "batches": batches,
            "batch_rows": batch_rows,
            "sweep_run": sweep_run,
        },
    )
    storage_detail.record_orphans(conn, orphans)
    return StorageRefresh(
        totals["threads"],
        totals["checkpoints"],
        totals["blobs"],
        totals["writes"],
        batches,
        tuple(metadata_keys),
        detailed,
    )


# Where our database is apart (issue 52): ours' transaction takes the refresh's lock first (one refresh at a time),
# then the agents' side is read in one REPEATABLE READ READ ONLY snapshot for every batch (nothing written there).
REFRESH_APART_OURS = REFRESH_THREAD_STORAGE[1:]
REFRESH_APART_AGENTS = [
    "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY",
    "SET LOCAL plan_cache_mode = force_custom_plan",
]


def _refresh_apart(
    conn: psycopg.Connection[DictRow],
    mine: psycopg.Connection[DictRow],
    metadata_keys: tuple[str, ...],
    batch_rows: int,
    on_batch: Callable[[int, str | None], None] | None,
    known_query: str | None,
    full: bool,
    sweep_run: int | None,
) -> StorageRefresh:
    """refresh_storage_conn where our database (`mine`, autocommit) is apart from the agents' (`conn`, inside the
    caller's transaction): every batch's rows and detail computed on `conn` in one snapshot (SELECT_STORAGE_ROWS,
    storage_detail.SELECT_*_ROWS) and written in one transaction of ours, committed here."""
    flags, keys = _key_flags(metadata_keys)
    totals = {"threads": 0, "checkpoints": 0, "blobs": 0, "writes": 0}
    orphans = storage_detail.Orphans.configured(known_query)
    batches = detailed = 0
    with mine.transaction():
        for sql in REFRESH_APART_OURS:
            mine.execute(sql)
        for sql in REFRESH_APART_AGENTS:  # after ours' lock: a refresh that waited reads a later snapshot
            conn.execute(sql)
        for lo, hi in thread_ranges(conn, SELECT_BATCH_END, batch_rows - 1):
            thread_range = key_ranges(lo, hi)
            known = orphans.known_column(conn, key_ranges(lo, hi, storage_detail.KNOWN_RANGE))
            rows = one(
                conn.execute(
                    pgsql.SQL(SELECT_STORAGE_ROWS).format(
                        flags=flags, keys=keys, range=thread_range, known=known, **storage_detail.HASHES
                    ),
                    prepare=False,
                ).fetchone()
            )["rows"]
            old = one(
                mine.execute(pgsql.SQL(DELETE_STORAGE_RANGE).format(range=thread_range), prepare=False).fetchone()
            )
            row = one(
                mine.execute(
                    pgsql.SQL(INSERT_STORAGE_ROWS).format(
                        full=pgsql.Literal(full),
                        old_threads=pgsql.Literal(old["threads"]),
                        old_fingerprints=pgsql.Literal(old["fingerprints"]),
                    ),
                    {"rows": rows},
                    prepare=False,
                ).fetchone()
            )
            orphans.add_batch(row)
            storage_detail.refresh_range(
                conn,
                thread_range,
                key_ranges(lo, hi, "s.thread_id"),
                row["changed"],
                len(row["changed"]) == row["threads"],
                ours=mine,
            )
            batches += 1
            detailed += len(row["changed"])
            for k in totals:
                totals[k] += int(row[k])
            if on_batch is not None:
                on_batch(batches, hi)
        mine.execute(
            UPSERT_STORAGE_REFRESH,
            {
                "keys": list(metadata_keys),
                **totals,
                "batches": batches,
                "batch_rows": batch_rows,
                "sweep_run": sweep_run,
            },
        )
        storage_detail.record_orphans(mine, orphans)
    return StorageRefresh(
        totals["threads"],
        totals["checkpoints"],
        totals["blobs"],
        totals["writes"],
        batches,
        tuple(metadata_keys),
        detailed,
    )


def refresh_thread_storage(
    db: Database,
    metadata_keys: tuple[str, ...] | None = None,
    batch_rows: int = STORAGE_BATCH_ROWS,
    known_query: str | None | object = FROM_SETTINGS,
    full: bool = False,
    sweep_run: int | None = None,
) -> int:
    """Recompute `core_thread_storage` from the three checkpoint tables in one transaction (readers see the old
    rows until it commits), in batches of thread_id ranges of at most `batch_rows` rows per table (bounded temp
    space and memory), recording per thread which `metadata_keys` (default: SUBJECT_METADATA_KEYS) its
    checkpoints carry and whether `known_query` (default: KNOWN_THREADS_QUERY; None: none) returns it, and the
    detail (storage_detail) of the threads whose rows changed since the last refresh (of every thread when `full`);
    returns the number of threads."""
    from core.config import load_settings

    keys = default_metadata_keys() if metadata_keys is None else tuple(metadata_keys)
    query = load_settings().known_threads_query if known_query is FROM_SETTINGS else cast(str | None, known_query)
    with db.connection() as conn, conn.transaction():
        return refresh_storage_conn(conn, keys, batch_rows, known_query=query, full=full, sweep_run=sweep_run).threads


def storage_refresh(db: Database) -> dict | None:
    """The last refresh (computed_at, metadata_keys, threads, rows per table, batches, seconds, the sweep run that
    made it: sweep_run_id, sweep_started_at), None before one."""
    return db.ours.fetch_one(SELECT_STORAGE_REFRESH)


def table_totals(db: Database) -> pd.DataFrame:
    """Rows and on-disk size (with indexes and TOAST, read at `sized_at`: now) of each checkpoint table. The rows are
    exact as of the last storage refresh (`as_of`; `sweep_run_id`, `sweep_started_at`: the sweep run that made it);
    before any refresh they are counted now (`as_of` None)."""
    ours = db.ours
    if ours is db:
        kept = db.fetch(SELECT_KEPT_TABLE_TOTALS)
    else:  # issue 52: the rows kept in ours, the sizes read now on the agents' side (2Q)
        kept = ours.fetch(SELECT_KEPT_TABLE_ROWS)
        sizes = {r["table_name"]: r for r in db.fetch(SELECT_TABLE_SIZES)}
        kept = [{**r, **sizes[r["table_name"]]} for r in kept]
    if kept:
        return pd.DataFrame(kept, columns=TOTALS_COLUMNS)
    frame = pd.DataFrame(db.fetch(SELECT_TABLE_TOTALS), columns=TOTALS_COLUMNS[:-1])
    frame["as_of"] = frame["sweep_run_id"] = frame["sweep_started_at"] = None
    return frame
