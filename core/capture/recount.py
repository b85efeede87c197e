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
from typing import Any

from core.capture.follower import FOLLOWER_LOCK, open_links, slot_name_for, stream_recount, try_lock, wal_now

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
# time; and then every thread whose checkpoints or pending writes are not those the indexer read (its signatures,
# compared in Python):
# a thread written late with old times (the dual saver's replay of its buffer or journal keeps the checkpoints'
# original `ts`, possibly days later) is listed too, and so is a thread no indexer ever read.
THREADS_SINCE = """
SELECT DISTINCT thread_id FROM checkpoints
WHERE %(since)s::timestamptz IS NULL
   OR (checkpoint ->> 'ts')::timestamptz > %(since)s::timestamptz - interval '1 hour'"""
# The token index's signatures (core_thread_tokens: in the dashboard's database, with the dirty marks; issue 52, B),
# compared in Python with the agents' rows' signatures read in the recount's snapshot (2Q).
SELECT_INDEXED_SIGNATURES = "SELECT thread_id, rows_sig FROM core_thread_tokens"
MARK_DIRTY = """
INSERT INTO core_token_dirty (thread_id) SELECT unnest(%s::text[]) ORDER BY 1
ON CONFLICT (thread_id) DO UPDATE SET claimed_at = NULL"""
SAVE = """
INSERT INTO core_capture_position AS p (slot_name, lsn, recounted_at, caught_up_lsn, caught_up_at)
VALUES (%(slot)s, %(lsn)s::pg_lsn, now(), %(lsn)s::pg_lsn, now())
ON CONFLICT (slot_name) DO UPDATE SET lsn = EXCLUDED.lsn, applied_at = now(), recount_snapshot = NULL,
    recount_lsn = NULL, recounted_at = now(), caught_up_lsn = EXCLUDED.caught_up_lsn, caught_up_at = now()"""


@dataclass(frozen=True)
class Recount:
    done: bool
    reason: str  # why not (a slot follows the database, a follower holds the lock), or how long it took
    seconds: float = 0.0


def recount_without_slot(dsn: str) -> Recount:
    """Recount every aggregate from the tables in one REPEATABLE READ snapshot, unless a slot follows `dsn`: read
    where the slot would be read (the agents' standby when configured), written in the dashboard's database."""
    with open_links(dsn, application_name="core_capture_recount") as links:
        src, ours = links.src, links.ours
        slot = slot_name_for(links.primary.info.dbname)
        if not try_lock(ours):
            return Recount(False, "a change follower runs: it keeps the aggregates")
        try:
            if src.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone():
                return Recount(False, f"slot {slot} follows this database: its follower keeps the aggregates")
            start = time.monotonic()
            indexed: dict[str, Any] = dict(ours.execute(SELECT_INDEXED_SIGNATURES).fetchall())
            with src.transaction(), ours.transaction():
                src.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                lsn = src.execute(f"SELECT {wal_now(links.standby)}").fetchone()
                since = ours.execute(
                    "SELECT recounted_at FROM core_capture_position WHERE slot_name = %s", (slot,)
                ).fetchone()
                stream_recount(src, ours, mark_all=False, apart=links.apart)
                dirty = {r[0] for r in src.execute(THREADS_SINCE, {"since": since[0] if since else None})}
                # every thread whose checkpoints or pending writes are not those the indexer read
                for thread, sig in src.execute(ROWS_SIGNATURE.format(where="")).fetchall():
                    if indexed.get(thread) != sig:
                        dirty.add(thread)
                ours.execute(MARK_DIRTY, (sorted(dirty),))
                ours.execute(SAVE, {"slot": slot, "lsn": lsn[0] if lsn else None})
            took = time.monotonic() - start
            log.info("aggregates recounted from the tables in %.1f s (no slot follows this database)", took)
            return Recount(True, f"recounted in {took:.1f} s", took)
        finally:
            ours.execute("SELECT pg_advisory_unlock(%s)", (FOLLOWER_LOCK,))
