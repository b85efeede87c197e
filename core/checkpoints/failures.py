"""What counts as "PostgreSQL is gone" for the dual saver, its exceptions and its tuning constants."""
from __future__ import annotations

from datetime import datetime, timezone

import psycopg
from psycopg_pool import PoolClosed, PoolTimeout

CALL_TIMEOUT_S = 2.0  # a PostgreSQL call taking longer counts as an outage (hung server)
HEARTBEAT_INTERVAL_S = 2.0
PROBE_INTERVAL_S = 0.2  # while degraded
PROBE_CONNECT_TIMEOUT_S = 1
PROBE_LOG_EVERY_S = 30.0  # a failing probe is logged when its cause changes, else this often
RESYNC_TIMEOUT_S = 15.0
CLOSE_RESYNC_TIMEOUT_S = 5.0  # close() while degraded: a last resync for this long, then the journal
THREAD_CACHE_SIZE = 2_000  # threads whose latest checkpoint is kept for degraded reads
POOL_SIZE = 8

# SQLSTATE classes that mean "the server is unreachable or going away", not a bad statement:
# 08 connection exception, 57P admin/crash shutdown or cannot connect now, 53 out of resources.
CONNECTION_SQLSTATE_PREFIXES = ("08", "57P", "53")


class DeadlineExceeded(TimeoutError):
    """A PostgreSQL call did not finish within the saver's deadline (hung server)."""


class CheckpointUnavailable(RuntimeError):
    """The operation needs PostgreSQL, which is unreachable; nothing was changed or dropped."""


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


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _ts(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, timezone.utc)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]

