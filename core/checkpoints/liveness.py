"""What decides that PostgreSQL is gone, not just slow: the liveness check, and the switch to degraded.

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
import time
from typing import Any

import psycopg

from core.checkpoints.failures import PROBE_CONNECT_TIMEOUT_S, _describe

log = logging.getLogger("core.checkpoints.dual_saver")

LIVENESS_SQL = "SELECT 1"


class Liveness:
    """Mixin of `DualCheckpointSaver`: the liveness thread and `_degrade`."""

    def _start_liveness(self) -> None:
        sh = self._shared
        if sh.liveness is None or not sh.liveness.is_alive():
            sh.liveness = threading.Thread(target=self._liveness_loop, name=f"dual-saver-liveness-{sh.replica_id}",
                                           daemon=True)
            sh.liveness.start()

    def _liveness_loop(self) -> None:
        sh = self._shared
        conn: psycopg.Connection | None = None
        try:
            while not sh.stop.is_set():  # the first check at once: its connection is then ready
                if sh.degraded:  # the monitor probes now; a fresh connection once it is back
                    conn = _close(conn)
                else:
                    try:
                        conn = self._check_alive(conn)
                    except Exception as exc:
                        conn = _close(conn)
                        if not sh.stop.is_set():
                            self._degrade(f"liveness check: {_describe(exc)}")
                sh.stop.wait(sh.liveness_interval)
        finally:
            _close(conn)

    def _check_alive(self, conn: psycopg.Connection | None) -> psycopg.Connection:
        """`SELECT 1` within the liveness deadline, on `conn` or a new connection; returns the connection.

        A connection that broke while the server still answers (e.g. it was restarted between two
        checks) is replaced once within the same deadline before PostgreSQL counts as gone.
        """
        sh = self._shared
        with sh.watchdog.deadline(sh.liveness_timeout) as call:
            if conn is not None and not conn.closed:
                try:
                    with sh.watchdog.watching(conn):
                        conn.execute(LIVENESS_SQL)
                    return conn
                except psycopg.OperationalError:
                    _close(conn)
                    if call.expired:  # cut at the deadline: hung, no second try
                        raise
            conn = psycopg.connect(sh.dsn, autocommit=True, connect_timeout=PROBE_CONNECT_TIMEOUT_S)
            try:
                with sh.watchdog.watching(conn):
                    conn.execute(LIVENESS_SQL)
            except BaseException:
                _close(conn)
                raise
            return conn

    def _degrade(self, reason: str) -> None:
        """Switch to degraded (once per episode) and cut every PostgreSQL call still in flight."""
        sh = self._shared
        with sh.changed:
            if sh.degraded:
                return
            sh.degraded = True
            sh.degraded_since = sh.now()
            sh.reason = reason
            sh.episode_checkpoints = sh.episode_writes = sh.resynced_ops = 0
            sh.episode_denials = []
            sh.seeded = set()
            sh.fates = {}
            sh.transitions.append((time.monotonic(), "degraded"))
            sh.changed.notify_all()
        sh.wake.set()
        cut = sh.watchdog.cut_all(f"PostgreSQL call cut: checkpoint persistence degraded ({reason})")
        log.warning("checkpoint persistence DEGRADED (replica %s): %s; %d call(s) in flight cut",
                    sh.replica_id, reason, cut)


def _close(conn: Any) -> None:
    if conn is not None:
        try:
            conn.close()
        except Exception as exc:  # a cut connection may fail to close cleanly: it is gone anyway
            log.debug("liveness connection not closed cleanly: %s", exc)
    return None
