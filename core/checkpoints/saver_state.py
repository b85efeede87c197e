"""The configuration and lifecycle a dual saver shares with its `with_allowlist` clones."""
from __future__ import annotations

import itertools
import os
import socket
import threading
from typing import Any

from core.checkpoints.deadlines import _Watchdog
from core.checkpoints.failures import _now, session_dsn


class _Shared:
    """Configuration and lifecycle shared by a saver and its `with_allowlist` clones (one per replica process)."""

    _ids = itertools.count(1)

    def __init__(self, dsn: str, *, replica_id: str | None, call_timeout: float, heartbeat_interval: float,
                 probe_interval: float, pool_size: int, resync_timeout: float,
                 publish_health: bool, close_resync_timeout: float, statement_timeout: float | None,
                 lock_timeout: float | None, clock: Any = None):
        # Every connection of the saver gets the server-side statement/lock timeouts and TCP settings.
        self.dsn = session_dsn(dsn, statement_timeout, lock_timeout)
        # The resync's replay is the monitor's own work under its resync_timeout deadline: it may wait
        # on a lock for that long (TCP settings only).
        self.resync_dsn = session_dsn(dsn, None, None)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.replica_id = replica_id or f"{self.host}:{self.pid}:{next(self._ids)}"
        self.call_timeout = call_timeout
        self.heartbeat_interval = heartbeat_interval
        self.probe_interval = probe_interval
        self.pool_size = pool_size
        self.resync_timeout = resync_timeout
        self.publish_health = publish_health
        self.close_resync_timeout = close_resync_timeout
        # The time episodes and heartbeats carry: real time, or the demo's ManualClock (core.clock).
        self.now = clock or _now
        self.started_at = self.now()
        self.watchdog = _Watchdog(f"dual-saver-watchdog-{self.replica_id}")
        self.last_monitor_error: str | None = None  # logged once while it lasts, again after it cleared
        self.stop = threading.Event()
        self.wake = threading.Event()
        self.monitor: threading.Thread | None = None
