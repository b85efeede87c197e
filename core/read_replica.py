"""The read replica: which server a dashboard read goes to, how far the replica lags, and the
wait that keeps an erasure's evidence honest on a replicated setup.

`PG_AGENTES_REPLICA` names a streaming hot standby (e.g. CloudNativePG's `-ro` service). The
read-heavy pages read there (ui.common.read routes through a `ReadRouter`); writes, the erasure
evidence and the registers stay on the primary (ui.common.call_now, jobs). While the replica does
not answer, reads fall back to the primary and the router tries the replica again every
`RETRY_S` seconds. No Streamlit here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import DictRow, dict_row

from core.db import CONNECT_TIMEOUT_S, Database, DatabaseBusy, DatabaseSlow, DatabaseUnavailable, describe_dsn, one

log = logging.getLogger(__name__)

RETRY_S = 5.0  # a replica marked down is tried again after this long
REPLAY_WAIT_S = 10.0  # bound on waiting for the replica to replay a write (erasure re-check)
REPLAY_POLL_S = 0.05

SELECT_PRIMARY_LSN = "SELECT pg_current_wal_lsn()::text AS lsn"
SELECT_REPLICA_STATE = """
SELECT pg_is_in_recovery()              AS in_recovery,
       pg_last_wal_replay_lsn()::text   AS replayed_lsn,
       pg_last_xact_replay_timestamp()  AS replayed_at,
       now()                            AS now
"""
# Bytes of WAL the replica has not replayed yet, up to a given primary LSN (0 once it is past it).
SELECT_REPLAY_BEHIND = "SELECT greatest(0, pg_wal_lsn_diff(%(lsn)s::pg_lsn, pg_last_wal_replay_lsn()))::bigint AS n"
REPLAY_EVIDENCE_TABLE = "replica_replay"


def lsn_int(lsn: str) -> int:
    """'16/B374D848' -> the byte position it names."""
    high, low = lsn.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def _connect(dsn: str) -> psycopg.Connection[DictRow]:
    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row, connect_timeout=CONNECT_TIMEOUT_S)


@dataclass(frozen=True)
class ReadUse:
    """The connection one read ran on: the server role, its target and backend pid."""

    source: str  # "replica" | "primary"
    target: str
    dsn: str
    backend_pid: int
    in_hot_standby: str | None  # what the server reported on that very connection
    at: float


class _RoutedDatabase(Database):
    """A Database on one server that tells its router which connection each read used."""

    def __init__(self, dsn: str, router: ReadRouter, source: str, *, embedded: bool = False):
        super().__init__(dsn, embedded=embedded)
        self._router, self.source = router, source

    @contextmanager
    def connection(self, *, read_only: bool = False) -> Iterator[psycopg.Connection[DictRow]]:
        with super().connection(read_only=read_only) as conn:
            self._router._used(self, conn)
            yield conn


@dataclass(frozen=True)
class ReplicaStatus:
    """How the replica is, as the sidebar shows it."""

    configured: bool
    up: bool
    target: str | None
    lag_bytes: int | None = None
    lag_seconds: float | None = None
    replayed_at: datetime | None = None  # the primary's commit time of the last replayed transaction
    error: str | None = None
    checked_at: float = 0.0

    def stale(self, bound_s: float) -> bool:
        """True when the replica's data is older than `bound_s`: pages then say "as of <replayed_at>"."""
        return self.up and self.lag_seconds is not None and self.lag_seconds > bound_s


class ReadRouter:
    """Where reads go: the replica while it answers, else the primary (tried again every `retry_s`)."""

    def __init__(self, primary: Database, replica_dsn: str | None, *, retry_s: float = RETRY_S):
        self.primary = _RoutedDatabase(primary.dsn, self, "primary", embedded=primary.embedded)
        configured = replica_dsn and replica_dsn != primary.dsn
        self.replica = _RoutedDatabase(replica_dsn, self, "replica") if replica_dsn and configured else None
        self.retry_s = retry_s
        self._lock = threading.Lock()
        self._down_error: str | None = None
        self._next_try = 0.0
        self.last_read: ReadUse | None = None

    @classmethod
    def for_database(cls, db: Database, **kwargs: Any) -> ReadRouter:
        """The router for a Database built from settings (its `read_dsn` is the replica when configured)."""
        return cls(db, db.read_dsn, **kwargs)

    @property
    def configured(self) -> bool:
        return self.replica is not None

    @property
    def fallback_error(self) -> str | None:
        """Why reads are on the primary now (None while the replica serves them)."""
        return self._down_error

    def source(self) -> str:
        """Where the next read goes: "replica", or "primary" (no replica, or it is down and not due a retry)."""
        if self.replica is None:
            return "primary"
        with self._lock:
            return "replica" if self._down_error is None or time.monotonic() >= self._next_try else "primary"

    def database(self, source: str) -> Database:
        return self.replica if source == "replica" and self.replica is not None else self.primary

    def mark_down(self, error: BaseException | str) -> None:
        with self._lock:
            if self._down_error is None:
                log.warning(
                    "read replica %s not reachable, reads fall back to the primary: %s",
                    self.replica.target if self.replica else "-",
                    error,
                )
            self._down_error = str(error).strip() or type(error).__name__
            self._next_try = time.monotonic() + self.retry_s

    def mark_up(self) -> None:
        with self._lock:
            if self._down_error is not None:
                log.info("read replica back: reads go to it again")
            self._down_error = None

    def _used(self, db: _RoutedDatabase, conn: psycopg.Connection[DictRow]) -> None:
        if db.source == "replica":
            self.mark_up()  # a connection to it was just made: reads go to it again
        self.last_read = ReadUse(
            db.source,
            describe_dsn(db.dsn),
            db.dsn,
            conn.info.backend_pid,
            conn.info.parameter_status("in_hot_standby"),
            time.time(),
        )

    def run(self, call: Callable[[Database, str], Any]) -> Any:
        """`call(database, source)` on the replica, or on the primary when the replica does not answer."""
        source = self.source()
        if source == "primary":
            return call(self.primary, source)
        assert self.replica is not None  # source() says "replica" only when one is configured
        try:
            result = call(self.replica, source)
        except (DatabaseBusy, DatabaseSlow):
            raise  # the replica answers: busy or slow is not down, and the primary is not the place for its load
        except DatabaseUnavailable as exc:
            self.mark_down(exc)
            return call(self.primary, "primary")
        return result

    def status(self) -> ReplicaStatus:
        """The replica's lag in bytes (primary's WAL position minus the replica's replayed one) and seconds
        (0 when it has replayed everything, else how old its last replayed transaction is). Direct
        connections with a short timeout, never the pools, so a dead replica answers in seconds."""
        if self.replica is None:
            return ReplicaStatus(False, False, None, checked_at=time.time())
        target = describe_dsn(self.replica.dsn)
        try:
            with _connect(self.primary.dsn) as conn:
                primary_lsn = one(conn.execute(SELECT_PRIMARY_LSN).fetchone())["lsn"]
            with _connect(self.replica.dsn) as conn:
                state = one(conn.execute(SELECT_REPLICA_STATE).fetchone())
        except psycopg.OperationalError as exc:
            self.mark_down(exc)
            return ReplicaStatus(True, False, target, error=str(exc).strip(), checked_at=time.time())
        if not state["in_recovery"]:
            return ReplicaStatus(
                True,
                True,
                target,
                0,
                0.0,
                state["now"],
                checked_at=time.time(),
                error="not in recovery: the replica DSN names a primary",
            )
        self.mark_up()
        behind = max(0, lsn_int(primary_lsn) - lsn_int(state["replayed_lsn"] or "0/0"))
        replayed_at = state["replayed_at"]
        if behind == 0:
            seconds = 0.0
        elif replayed_at is None:
            seconds = None
        else:
            seconds = max(0.0, (state["now"] - replayed_at).total_seconds())
        return ReplicaStatus(True, True, target, behind, seconds, replayed_at, checked_at=time.time())


_routers: dict[tuple[str, str], ReadRouter] = {}
_routers_lock = threading.Lock()


def router_for(db: Database) -> ReadRouter:
    """The process-wide router of `db`'s reads (one per primary and replica DSN, so its up/down state
    is shared by every session of the dashboard)."""
    key = (db.dsn, db.read_dsn)
    with _routers_lock:
        router = _routers.get(key)
        if router is None:
            router = _routers[key] = ReadRouter.for_database(db)
        return router


# --- a write on the primary, then reads on the replica -----------------------------------------


@dataclass(frozen=True)
class ReplayWait:
    lsn: str  # the primary's WAL position after the write
    behind_bytes: int | None  # what the replica still had to replay when the wait ended (None: unreachable)
    sql: str  # the literal query run on the replica
    waited_s: float
    target: str

    @property
    def caught_up(self) -> bool:
        return self.behind_bytes == 0


def wait_replayed(db: Database, *, timeout_s: float | None = None) -> ReplayWait | None:
    """After a write on the primary: take `pg_current_wal_lsn()` there and wait (at most `timeout_s`,
    default REPLAY_WAIT_S) until the replica's `pg_last_wal_replay_lsn()` has passed it. None without
    a replica."""
    if db.read_dsn == db.dsn:
        return None
    timeout_s = REPLAY_WAIT_S if timeout_s is None else timeout_s
    with db.connection() as conn:
        lsn = one(conn.execute(SELECT_PRIMARY_LSN).fetchone())["lsn"]
        sql = psycopg.ClientCursor(conn).mogrify(SELECT_REPLAY_BEHIND, {"lsn": lsn})
    started = time.monotonic()
    behind: int | None = None
    target = describe_dsn(db.read_dsn)
    try:
        with _connect(db.read_dsn) as conn:
            while True:
                behind = int(one(conn.execute(sql).fetchone())["n"])
                if behind == 0 or time.monotonic() - started >= timeout_s:
                    break
                time.sleep(REPLAY_POLL_S)  # polling the condition itself: replay has no notification
    except psycopg.OperationalError as exc:
        log.warning("replica %s not reachable while waiting for LSN %s: %s", target, lsn, exc)
        behind = None
    wait = ReplayWait(lsn, behind, sql, time.monotonic() - started, target)
    if not wait.caught_up:
        log.warning(
            "replica %s had not replayed LSN %s after %.1f s (%s bytes behind)", target, lsn, wait.waited_s, behind
        )
    return wait


def replay_evidence(db: Database, *, timeout_s: float | None = None) -> list[tuple[str, str, int, str]]:
    """The erasure re-check's extra evidence row on a replicated setup: (table, literal SQL run on the
    replica, bytes it had not replayed, time). 0 means the replica has replayed past the primary's WAL
    position taken after the evidence; anything else makes the re-check not clean. A replica that
    cannot be reached adds nothing (it serves nothing) and is logged."""
    wait = wait_replayed(db, timeout_s=timeout_s)
    if wait is None or wait.behind_bytes is None:
        return []
    return [(REPLAY_EVIDENCE_TABLE, wait.sql, wait.behind_bytes, datetime.now(UTC).isoformat(timespec="milliseconds"))]
