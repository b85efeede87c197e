"""Where logical decoding is not allowed (`wal_level` is not `logical`, or nobody may create the slot), the sweep job
keeps the follower's aggregates by recounting them from the agents' tables (issue 37 item 5): no trigger in either
mode. The pages then say their figures are as of that recount (ui/capture.py).

Only while no slot follows the database: with a slot (even one whose follower is down) the follower owns the
aggregates, and a recount here would count the changes the slot still holds twice. It runs under the follower's
advisory lock, so a follower starting meanwhile waits for it (its setup then creates the slot and recounts again)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from core.capture.follower import FOLLOWER_LOCK, RECOUNT, connect, slot_name_for, try_lock

log = logging.getLogger(__name__)

# The signature of what a thread holds, per thread: a sum of hashes of its checkpoints' and pending writes' keys. The
# token indexer stores it with the thread's tokens (core_thread_tokens.rows_sig, read before the rows it indexes);
# `{where}` restricts the threads (empty: all of them).
ROWS_SIGNATURE = """
SELECT thread_id, sum(h) AS sig FROM (
    SELECT thread_id, hashtextextended(checkpoint_ns || '/' || checkpoint_id, 0) AS h FROM checkpoints {where}
    UNION ALL
    SELECT thread_id, hashtextextended(checkpoint_ns || '/' || checkpoint_id || '/' || task_id || '/' || idx, 1)
    FROM checkpoint_writes {where}
) r GROUP BY thread_id"""
# RECOUNT marks every thread dirty for the token index (right once, when a slot starts); a sweep's recount marks the
# threads checkpointed since the previous one (an hour of margin for the agents' clocks), and every thread the first
# time; and then every thread whose checkpoints or pending writes are not those the indexer read (RELIST_CHANGED):
# a thread written late with old times (the dual saver's replay of its buffer or journal keeps the checkpoints'
# original `ts`, possibly days later) is listed too, and so is a thread no indexer ever read.
DIRTY_SINCE = """
INSERT INTO core_token_dirty (thread_id)
SELECT DISTINCT thread_id FROM checkpoints
WHERE %(since)s::timestamptz IS NULL OR (checkpoint ->> 'ts')::timestamptz > %(since)s::timestamptz - interval '1 hour'
ON CONFLICT (thread_id) DO UPDATE SET claimed_at = NULL"""
RELIST_CHANGED = f"""
INSERT INTO core_token_dirty (thread_id)
SELECT s.thread_id FROM ({ROWS_SIGNATURE.format(where="")}) s
LEFT JOIN core_thread_tokens t ON t.thread_id = s.thread_id
WHERE t.rows_sig IS DISTINCT FROM s.sig
ORDER BY 1
ON CONFLICT (thread_id) DO UPDATE SET claimed_at = NULL"""
SAVE = """
INSERT INTO core_capture_position AS p (slot_name, lsn, recounted_at, caught_up_lsn, caught_up_at)
VALUES (%(slot)s, pg_current_wal_lsn(), now(), pg_current_wal_lsn(), now())
ON CONFLICT (slot_name) DO UPDATE SET lsn = EXCLUDED.lsn, applied_at = now(), recount_snapshot = NULL,
    recount_lsn = NULL, recounted_at = now(), caught_up_lsn = EXCLUDED.caught_up_lsn, caught_up_at = now()"""


@dataclass(frozen=True)
class Recount:
    done: bool
    reason: str  # why not (a slot follows the database, a follower holds the lock), or how long it took
    seconds: float = 0.0


def recount_without_slot(dsn: str) -> Recount:
    """Recount every aggregate from the tables in one REPEATABLE READ snapshot, unless a slot follows `dsn`."""
    with connect(dsn, application_name="core_capture_recount") as conn:
        row = conn.execute("SELECT current_database()").fetchone()
        assert row is not None
        slot = slot_name_for(row[0])
        if not try_lock(conn):
            return Recount(False, "a change follower runs: it keeps the aggregates")
        try:
            if conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone():
                return Recount(False, f"slot {slot} follows this database: its follower keeps the aggregates")
            start = time.monotonic()
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                since = conn.execute(
                    "SELECT recounted_at FROM core_capture_position WHERE slot_name = %s", (slot,)
                ).fetchone()
                for sql in RECOUNT:
                    if "core_token_dirty" not in sql:
                        conn.execute(sql)
                conn.execute(DIRTY_SINCE, {"since": since[0] if since else None})
                conn.execute(RELIST_CHANGED)
                conn.execute(SAVE, {"slot": slot})
            took = time.monotonic() - start
            log.info("aggregates recounted from the tables in %.1f s (no slot follows this database)", took)
            return Recount(True, f"recounted in {took:.1f} s", took)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (FOLLOWER_LOCK,))
