"""What decides that PostgreSQL is gone, not just slow: the liveness check.

A thread of its own runs `SELECT 1` on a connection of its own every `liveness_interval` (0.5 s)
while the saver is healthy, under a `liveness_timeout` deadline (1 s) that the watchdog enforces by
cutting the socket. A hung server never answers it, a stopped one refuses it: the saver degrades
and the watchdog cuts every call in flight, which then goes to the buffer. A server that answers it
is only slow: the agents' calls wait, bounded server-side by statement_timeout / lock_timeout, and
a timeout there is a query error raised to the caller, not an outage (the guard denies nothing).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.rows import DictRow

from agent_memory_runtime.deadlines import _Watchdog
from agent_memory_runtime.failures import PROBE_CONNECT_TIMEOUT_S, _describe

log = logging.getLogger("agent_memory_runtime.dual_saver")

LIVENESS_SQL = "SELECT 1"


class Liveness:
    """The liveness check's thread. It decides "gone" and says so through `on_gone(reason)`; what
    degrading means (buffer, cutting calls in flight) is the saver's business."""

    def __init__(
        self,
        dsn: str,
        *,
        replica_id: str,
        interval: float,
        timeout: float,
        watchdog: _Watchdog,
        is_degraded: Callable[[], bool],
        on_gone: Callable[[str], None],
    ):
        self._dsn = dsn
        self._name = f"dual-saver-liveness-{replica_id}"
        self._interval = interval
        self._timeout = timeout
        self._watchdog = watchdog
        self._is_degraded = is_degraded
        self._on_gone = on_gone
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if not self.running:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def stop(self, timeout: float) -> None:
        """End the thread (waits up to `timeout` s for a check in progress)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def _loop(self) -> None:
        conn: psycopg.Connection[DictRow] | None = None
        try:
            while not self._stop.is_set():  # the first check at once: its connection is then ready
                if self._is_degraded():  # the monitor probes now; a fresh connection once it is back
                    _close(conn)
                    conn = None
                else:
                    try:
                        conn = self._check_alive(conn)
                    except Exception as exc:
                        _close(conn)
                        conn = None
                        if not self._stop.is_set():
                            self._on_gone(f"liveness check: {_describe(exc)}")
                self._stop.wait(self._interval)
        finally:
            _close(conn)

    def _check_alive(self, conn: psycopg.Connection[DictRow] | None) -> psycopg.Connection[DictRow]:
        """`SELECT 1` within the liveness deadline, on `conn` or a new connection; returns the connection.

        A connection that broke while the server still answers (e.g. it was restarted between two
        checks) is replaced once within the same deadline before PostgreSQL counts as gone.
        """
        watchdog = self._watchdog
        with watchdog.deadline(self._timeout) as call:
            if conn is not None and not conn.closed:
                try:
                    with watchdog.watching(conn):
                        conn.execute(LIVENESS_SQL)
                    return conn
                except psycopg.OperationalError:
                    _close(conn)
                    if call.expired:  # cut at the deadline: hung, no second try
                        raise
            conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=PROBE_CONNECT_TIMEOUT_S)
            try:
                with watchdog.watching(conn):
                    conn.execute(LIVENESS_SQL)
            except BaseException:
                _close(conn)
                raise
            return conn


def _close(conn: Any) -> None:
    if conn is not None:
        try:
            conn.close()
        except Exception as exc:  # a cut connection may fail to close cleanly: it is gone anyway
            log.debug("liveness connection not closed cleanly: %s", exc)
    return None
