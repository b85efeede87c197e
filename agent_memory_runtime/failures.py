"""What counts as "PostgreSQL is gone" for the dual saver, its exceptions and its tuning constants."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
from psycopg_pool import PoolClosed, PoolTimeout

CALL_TIMEOUT_S = 2.0  # deadline of the monitor's own calls (heartbeat, health rows, probe), not the agents'
HEARTBEAT_INTERVAL_S = 2.0  # heartbeat row and tombstone poll while healthy
# "Gone" is decided by the liveness check: `SELECT 1` on a connection of its own this often, cut
# (watchdog) past its deadline. A failure degrades the saver and cuts the agents' calls in flight.
LIVENESS_INTERVAL_S = 0.5
LIVENESS_TIMEOUT_S = 1.0
# "Slow" is bounded by the server on every saver connection: a statement or a lock wait past these
# fails with a query error (QueryCanceled 57014, LockNotAvailable 55P03) raised to the caller.
STATEMENT_TIMEOUT_S = 10.0
LOCK_TIMEOUT_S = 5.0
# libpq TCP settings of every saver connection (ignored on Unix sockets): a peer that vanished
# (host down, connection dropped by a NAT) breaks the connection instead of leaving a call waiting.
TCP_SETTINGS = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
}
PROBE_INTERVAL_S = 0.2  # while degraded
PROBE_CONNECT_TIMEOUT_S = 1
PROBE_LOG_EVERY_S = 30.0  # a failing probe is logged when its cause changes, else this often
RESYNC_TIMEOUT_S = 15.0
CLOSE_RESYNC_TIMEOUT_S = 5.0  # close() while degraded: a last resync for this long, then the journal
MAX_BUFFERED_OPS = 100_000  # operations a degraded replica buffers before it refuses more (BufferFull)
THREAD_CACHE_SIZE = 2_000  # threads whose latest checkpoint is kept for degraded reads
POOL_SIZE = 8

# SQLSTATE classes that mean "the server is unreachable or going away", not a bad statement:
# 08 connection exception, 57P admin/crash shutdown or cannot connect now, 53 out of resources.
CONNECTION_SQLSTATE_PREFIXES = ("08", "57P", "53")


class DeadlineExceeded(TimeoutError):
    """A PostgreSQL call past its deadline, or cut because PostgreSQL was found gone (hung server)."""


class CheckpointUnavailable(RuntimeError):
    """The operation needs PostgreSQL, which is unreachable; nothing was changed or dropped."""


class BufferFull(CheckpointUnavailable):
    """Degraded, the buffer holds `max_buffered_ops` operations: this one is refused, nothing was changed."""


def is_connection_failure(exc: BaseException) -> bool:
    """True for errors that mean PostgreSQL cannot be reached (degrade), False for data errors."""
    if isinstance(exc, (DeadlineExceeded, PoolTimeout, PoolClosed, CheckpointUnavailable)):
        return True
    if isinstance(exc, psycopg.OperationalError):
        sqlstate = getattr(exc, "sqlstate", None)
        return sqlstate is None or sqlstate.startswith(CONNECTION_SQLSTATE_PREFIXES)
    if isinstance(exc, psycopg.InterfaceError):
        return "closed" in str(exc).lower() or "lost" in str(exc).lower()
    return False


def session_dsn(dsn: str, statement_timeout: float | None, lock_timeout: float | None) -> str:
    """`dsn` plus the saver's session settings: server-side statement/lock timeouts (ms, in the
    startup `options`, kept after any the DSN has) and the TCP settings the DSN does not set."""
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    options = [str(params.get("options") or "")]
    for name, seconds in (("statement_timeout", statement_timeout), ("lock_timeout", lock_timeout)):
        if seconds is not None:
            options.append(f"-c {name}={max(1, int(seconds * 1000))}")
    params["options"] = " ".join(o for o in options if o)
    for name, setting in TCP_SETTINGS.items():
        params.setdefault(name, setting)
    return psycopg.conninfo.make_conninfo("", **{k: v for k, v in params.items() if v not in (None, "")})


def _now() -> datetime:
    return datetime.now(UTC)


def _ts(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


# What a degradation's reason (`_describe` of the failure: "<exception type>: <first line>") was, for a page to say
# in words; the text itself stays as it was written (a driver's message, in English).
REASON_KINDS = {
    "DeadlineExceeded": "deadline",  # a call that did not return in time, cut by the watchdog
    "PoolTimeout": "pool",  # no connection could be had in time
    "OperationalError": "unreachable",
    "InterfaceError": "unreachable",
    "PoolClosed": "unreachable",
    "CheckpointUnavailable": "unreachable",
}


def reason_kind(reason: str | None) -> str:
    """The kind of a recorded degradation reason ("<type>: ...", or the liveness thread's "liveness check: <type>:
    ..."): deadline | pool | unreachable | other."""
    parts = [p.strip() for p in (reason or "").split(":", 2)[:2]]
    return next((REASON_KINDS[p] for p in parts if p in REASON_KINDS), "other")
