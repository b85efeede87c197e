"""How far the change follower is, for the pages, the exporter and the reads that must be current.

The aggregates the follower keeps (documents per prefix and root, expiry days, value holders, the token index's
dirty threads) are as fresh as its position: a page shows the follower's lag next to them, and "unknown" when no
follower runs, never a stale figure as current. Reads that must be current (the erasure, its preview and
evidence) call `sync` first: it waits until everything written before it is applied.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import datetime

import pandas as pd
import psycopg
from psycopg.rows import DictRow, dict_row

from core.capture.follower import FOLLOWER_LOCK, CaptureNotAllowed, CaptureTimeout, catch_up, lsn_int
from core.capture.recount import recount_without_slot
from core.db import Database, dashboard_dsn_of, decode_dsn_of, one

log = logging.getLogger(__name__)

SYNC_TIMEOUT_S = 30.0
# Read where the slot is (the agents' primary, or their standby; issue 52): the slot and the WAL it keeps. The slot's
# name as core.capture.follower.slot_name_for gives it. `wal_now`: where the WAL ends as the slot's reader sees it.
SELECT_SLOT = """
WITH n AS (
    SELECT left('core_capture_' || regexp_replace(lower(current_database()), '[^a-z0-9_]', '_', 'g'), 63) AS slot)
SELECT n.slot AS slot_name, s.slot_name IS NOT NULL AS slot, s.wal_status,
       pg_wal_lsn_diff(w.lsn, s.restart_lsn)::bigint AS retained_bytes, s.safe_wal_size, w.lsn::text AS wal_now
FROM n CROSS JOIN LATERAL (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
                                       ELSE pg_current_wal_lsn() END AS lsn) w
LEFT JOIN pg_replication_slots s ON s.slot_name = n.slot AND s.database = current_database()"""
# Read in ours: `running` (some session holds the follower's advisory lock there: a follower thread or process, or a
# catch_up in progress), how far everything is applied, and the open dead letters.
SELECT_FOLLOWING = """
SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_database d ON d.oid = l.database
               WHERE d.datname = current_database() AND l.locktype = 'advisory' AND l.granted
                 AND l.classid = %(hi)s::bigint::oid AND l.objid = %(lo)s::bigint::oid AND l.objsubid = 1) AS running,
       p.caught_up_at, p.caught_up_lsn::text, extract(epoch FROM now() - p.caught_up_at)::float8 AS lag_seconds,
       p.recounted_at,
       (SELECT count(*) FROM core_capture_dead_letters WHERE recounted_at IS NULL) AS dead_letters
FROM (SELECT 1) one LEFT JOIN core_capture_position p ON p.slot_name = %(slot)s"""
LOCK_KEY = {"hi": FOLLOWER_LOCK >> 32, "lo": FOLLOWER_LOCK & 0xFFFFFFFF}


@dataclass(frozen=True)
class CaptureStatus:
    """`running` False: no follower, the lag is unknown and the aggregates are as of `caught_up_at` (or never)."""

    running: bool
    slot: bool
    wal_status: str | None  # reserved | extended | unreserved | lost (pg_replication_slots)
    retained_bytes: int | None  # WAL the slot keeps from being recycled
    safe_wal_size: int | None  # bytes left before max_slot_wal_keep_size invalidates the slot (None: no limit)
    caught_up_at: datetime | None  # everything written before this is in the aggregates
    lag_bytes: int | None
    lag_seconds: float | None
    recounted_at: datetime | None
    dead_letters: int = 0  # rows the follower could not apply since the last recount: their aggregates unknown

    @property
    def known(self) -> bool:
        """The lag can be stated: a follower runs on a slot that is not lost."""
        return self.running and self.slot and self.wal_status != "lost" and self.caught_up_at is not None


def capture_status(db: Database) -> CaptureStatus:
    with db.connection() as conn:
        return read_status(conn)


def read_status(conn: psycopg.Connection[DictRow]) -> CaptureStatus:
    """The status of the follower of the agents' database `conn` is connected to: the slot read where it is decoded,
    the rest in the dashboard's database (each on a connection of its own when it is not this one)."""
    with contextlib.ExitStack() as stack:
        source, ours = decode_dsn_of(conn), dashboard_dsn_of(conn)
        src = stack.enter_context(psycopg.connect(source, row_factory=dict_row)) if source else conn
        slot = one(src.execute(SELECT_SLOT).fetchone())
        mine = stack.enter_context(psycopg.connect(ours, row_factory=dict_row)) if ours else conn
        row = one(mine.execute(SELECT_FOLLOWING, {**LOCK_KEY, "slot": slot["slot_name"]}).fetchone())
    lag_bytes = lsn_int(slot["wal_now"]) - lsn_int(row["caught_up_lsn"]) if row["caught_up_lsn"] else None
    return CaptureStatus(
        running=bool(row["running"]),
        slot=bool(slot["slot"]),
        wal_status=slot["wal_status"],
        retained_bytes=slot["retained_bytes"],
        safe_wal_size=slot["safe_wal_size"],
        caught_up_at=row["caught_up_at"],
        lag_bytes=max(0, lag_bytes) if lag_bytes is not None else None,
        lag_seconds=max(0.0, row["lag_seconds"]) if row["lag_seconds"] is not None else None,
        recounted_at=row["recounted_at"],
        dead_letters=int(row["dead_letters"] or 0),
    )


# The follower's dead letters not cleared by a recount yet (migration 152), newest first.
SELECT_DEAD_LETTERS = """
SELECT recorded_at, lsn::text AS lsn, table_name, row_key, error, array_to_string(unknown, '; ') AS unknown, xid
FROM core_capture_dead_letters WHERE recounted_at IS NULL ORDER BY recorded_at DESC, id DESC LIMIT %(limit)s"""


def open_dead_letters(db: Database, limit: int = 200) -> pd.DataFrame:
    """The changes the follower could not apply since its last recount (their aggregates are unknown), newest
    first: when, the slot position, table, row, error and the aggregates it touches."""
    columns = ["recorded_at", "lsn", "table_name", "row_key", "error", "unknown", "xid"]
    return pd.DataFrame(db.ours.fetch(SELECT_DEAD_LETTERS, {"limit": limit}), columns=columns)


def sync(db: Database, timeout: float = SYNC_TIMEOUT_S) -> bool:
    """Make the aggregates include every change committed before this call: wait for the follower (or drain the slot
    here, core.capture.follower.catch_up). Where logical decoding is not possible, recount them from the tables now
    (core.capture.recount) and return False. Raises CaptureTimeout past `timeout` seconds."""
    try:
        catch_up(db.dsn, timeout)
    except CaptureNotAllowed as exc:  # the recount mode (core.capture.recount): the aggregates recounted now
        log.warning("the change follower cannot run here (%s): the aggregates are recounted from the tables", exc)
        deadline = time.monotonic() + timeout
        while not recount_without_slot(db.dsn).done:  # a sweep's recount holds the lock: then ours, after it
            if time.monotonic() > deadline:
                raise CaptureTimeout(f"the aggregates could not be recounted within {timeout:.0f} s") from exc
            time.sleep(0.2)
        return False
    return True


def main() -> None:
    """`python -m core.capture.status --check SECONDS [DSN]`: exit 0 when a follower of the database runs and had
    applied everything up to SECONDS ago (the Deployment's liveness probe), else 1."""
    import argparse

    from core.config import load_settings
    from core.db import resolve_dsn

    parser = argparse.ArgumentParser(prog="python -m core.capture.status")
    parser.add_argument("dsn", nargs="?", help="default: PG_AGENTES")
    parser.add_argument("--check", type=float, required=True, metavar="SECONDS")
    args = parser.parse_args()
    s = capture_status(Database(args.dsn or resolve_dsn(load_settings())))
    print(f"running={s.running} slot={s.slot} wal_status={s.wal_status} lag_seconds={s.lag_seconds}")
    raise SystemExit(0 if s.known and (s.lag_seconds or 0.0) <= args.check else 1)


if __name__ == "__main__":
    main()
