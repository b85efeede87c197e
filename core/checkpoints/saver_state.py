"""The state a dual saver shares with its `with_allowlist` clones, and config helpers."""
from __future__ import annotations

import itertools
import os
import socket
import threading
import time
from collections import OrderedDict
from datetime import datetime
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, get_checkpoint_id
from langgraph.checkpoint.memory import InMemorySaver

from core.checkpoints.deadlines import _Watchdog
from core.checkpoints.journal import Journal, default_journal_dir
from core.checkpoints.failures import _now, session_dsn

class _Shared:
    """State shared by a saver and its `with_allowlist` clones (one per replica process)."""

    _ids = itertools.count(1)

    def __init__(self, dsn: str, *, replica_id: str | None, call_timeout: float, heartbeat_interval: float,
                 probe_interval: float, pool_size: int, thread_cache_size: int, resync_timeout: float,
                 publish_health: bool, close_resync_timeout: float, journal_dir: Any,
                 statement_timeout: float | None,
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
        self.thread_cache_size = thread_cache_size
        self.resync_timeout = resync_timeout
        self.publish_health = publish_health
        self.close_resync_timeout = close_resync_timeout
        self.journal = Journal(Path(journal_dir) if journal_dir is not None else default_journal_dir(), self.replica_id, dsn)
        self.journal_pending = self.journal.path.exists()
        # The time episodes and heartbeats carry: real time, or the demo's ManualClock (core.clock).
        self.now = clock or _now
        self.started_at = self.now()

        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)  # notified on every state change
        self.watchdog = _Watchdog(f"dual-saver-watchdog-{self.replica_id}")

        self.degraded = False
        self.degraded_since: datetime | None = None
        self.reason: str | None = None
        self.memory = InMemorySaver()
        self.ops: list[tuple[str, Any]] = []  # the resync log, in order: rows as PostgresSaver writes them
        self.seeded: set[str] = set()  # threads copied from the read cache into memory this episode
        self.tombstoned: set[str] = set()  # erased threads seen (tombstones): never seeded or replayed
        self.episode_checkpoints = 0
        self.episode_writes = 0
        self.resynced_ops = 0
        self.episode_denials: list[dict[str, Any]] = []
        self.transitions: list[tuple[float, str]] = [(time.monotonic(), "healthy")]
        self.last_monitor_error: str | None = None  # logged once while it lasts, again after it cleared

        self.cache_lock = threading.Lock()
        self.cache: OrderedDict[tuple[str, str], CheckpointTuple] = OrderedDict()

        self.stop = threading.Event()
        self.wake = threading.Event()
        self.monitor: threading.Thread | None = None


def _thread_of(config: RunnableConfig) -> tuple[str, str, str | None]:
    conf = config["configurable"]
    return str(conf["thread_id"]), conf.get("checkpoint_ns", ""), get_checkpoint_id(config)


def _minimal(config: RunnableConfig) -> RunnableConfig:
    conf = config["configurable"]
    out = {"thread_id": conf["thread_id"], "checkpoint_ns": conf.get("checkpoint_ns", "")}
    if conf.get("checkpoint_id"):
        out["checkpoint_id"] = conf["checkpoint_id"]
    return {"configurable": out}
