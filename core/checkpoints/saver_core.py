"""The dual saver's core: construction, serializer, live state, lifecycle, the wrapped savers
(one sync, one async per event loop) and what a failed call does (the switch to degraded itself,
and the liveness check that decides PostgreSQL is gone, are in `core.checkpoints.liveness`)."""
from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from datetime import datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.serde.base import SerializerProtocol, maybe_add_typed_methods
import psycopg
from psycopg.rows import dict_row

from core.checkpoints import metrics, replica_health
from core.checkpoints.failures import (
    CALL_TIMEOUT_S,
    CLOSE_RESYNC_TIMEOUT_S,
    HEARTBEAT_INTERVAL_S,
    LIVENESS_INTERVAL_S,
    LIVENESS_TIMEOUT_S,
    LOCK_TIMEOUT_S,
    POOL_SIZE,
    PROBE_INTERVAL_S,
    RESYNC_TIMEOUT_S,
    STATEMENT_TIMEOUT_S,
    THREAD_CACHE_SIZE,
    _describe,
    _ts,
    is_connection_failure,
)
from core.checkpoints.degraded_buffer import BufferedEpisode, DegradedBuffer
from core.checkpoints.health_publisher import HealthPublisher
from core.checkpoints.journal import Journal, default_journal_dir
from core.checkpoints.liveness import Liveness
from core.checkpoints.recovery import Recovery
from core.checkpoints.read_cache import thread_of
from core.checkpoints.saver_state import _Shared
from core.checkpoints.serde import AllowlistSerializer, RefusalLog, SerializationRefused
from core.checkpoints.wrapped_savers import WrappedSavers

log = logging.getLogger("core.checkpoints.dual_saver")


def refuse_on_event_loop() -> None:
    """The sync API blocks: on an event loop's thread it would stall every task (langgraph's rule)."""
    if asyncio._get_running_loop() is None:  # (asyncio.events.__all__; get_running_loop raises when there is none)
        return
    raise asyncio.InvalidStateError(
        "Synchronous calls to DualCheckpointSaver are only allowed from a thread without a running event "
        "loop; use the async API (ainvoke, aget_tuple, ...) or asyncio.to_thread.")


class SaverCore(BaseCheckpointSaver[str]):
    """The part of `DualCheckpointSaver` that the buffer, recovery and health mixins build on.

    `dsn` is the agents' database (migrated: checkpoint tables and 003_replica_health). The
    monitor thread starts with the saver; `close()` (or the context manager) stops it.
    """

    def __init__(self, dsn: str, *, serde: SerializerProtocol | None = None, replica_id: str | None = None,
                 call_timeout: float = CALL_TIMEOUT_S, heartbeat_interval: float = HEARTBEAT_INTERVAL_S,
                 probe_interval: float = PROBE_INTERVAL_S, pool_size: int = POOL_SIZE,
                 thread_cache_size: int = THREAD_CACHE_SIZE, resync_timeout: float = RESYNC_TIMEOUT_S,
                 publish_health: bool = True, start: bool = True,
                 close_resync_timeout: float = CLOSE_RESYNC_TIMEOUT_S, journal_dir: str | Path | None = None,
                 liveness_interval: float = LIVENESS_INTERVAL_S, liveness_timeout: float = LIVENESS_TIMEOUT_S,
                 statement_timeout: float | None = STATEMENT_TIMEOUT_S, lock_timeout: float | None = LOCK_TIMEOUT_S,
                 clock: Callable[[], datetime] | None = None):
        # Not BaseCheckpointSaver.__init__: `serde` is a property that also re-targets the inner savers.
        self._shared = _Shared(dsn, replica_id=replica_id, call_timeout=call_timeout,
                               heartbeat_interval=heartbeat_interval, probe_interval=probe_interval,
                               pool_size=pool_size,
                               resync_timeout=resync_timeout, publish_health=publish_health,
                               close_resync_timeout=close_resync_timeout,
                               statement_timeout=statement_timeout, lock_timeout=lock_timeout, clock=clock)
        sh = self._shared
        serde = maybe_add_typed_methods(serde if serde is not None else AllowlistSerializer(refusals=RefusalLog()))
        journal = Journal(Path(journal_dir) if journal_dir is not None else default_journal_dir(), sh.replica_id, dsn)
        self._buffer = DegradedBuffer(serde, thread_cache_size=thread_cache_size, journal=journal, now=sh.now)
        self._postgres = WrappedSavers(self._shared.dsn, serde=serde, replica_id=self._shared.replica_id,
                                       pool_size=pool_size, call_timeout=call_timeout,
                                       watchdog=self._shared.watchdog, is_degraded=lambda: self._buffer.degraded)
        self._health = HealthPublisher(sh.dsn, replica_id=sh.replica_id, host=sh.host, pid=sh.pid,
                                       started_at=sh.started_at, heartbeat_interval=heartbeat_interval,
                                       call_timeout=call_timeout, watchdog=sh.watchdog,
                                       watched=lambda: self._liveness.running, live=self._live)
        self._recovery = Recovery(sh.dsn, sh.resync_dsn, replica_id=sh.replica_id, call_timeout=call_timeout,
                                  resync_timeout=resync_timeout, watchdog=sh.watchdog)
        self.serde = serde
        self._liveness = Liveness(self._shared.dsn, replica_id=self._shared.replica_id, interval=liveness_interval,
                                  timeout=liveness_timeout, watchdog=self._shared.watchdog,
                                  is_degraded=lambda: self._buffer.degraded, on_gone=self._degrade)
        if start:
            self.start()

    # --- serializer: the wrapped savers always use ours ----------------------------------

    @property
    def serde(self) -> SerializerProtocol:  # type: ignore[override]
        return self._serde

    @serde.setter
    def serde(self, value: SerializerProtocol) -> None:
        # Called on a `copy.copy` clone by `with_allowlist`: give the clone its own inner savers.
        self._serde = maybe_add_typed_methods(value)
        self._postgres = self._postgres.with_serde(self._serde)
        self._buffer = self._buffer.with_serde(self._serde)
        refusals = getattr(value, "refusals", None)
        if isinstance(refusals, RefusalLog):
            self._health.watch_refusals(refusals)

    # --- live state (the guard reads it at every tool call) -----------------------------------

    @property
    def degraded(self) -> bool:
        return self._buffer.degraded

    @property
    def replica_id(self) -> str:
        return self._shared.replica_id

    def status(self) -> dict[str, Any]:
        """Live state and counters (the Degradation page, the guard, a Prometheus collector).

        Gauges: state, resyncing (degraded, the buffer is being replayed), degraded_since / degraded_seconds, buffered_ops / buffered_checkpoints /
        buffered_writes (this episode), last_resync_ms. Monotonic counters: episodes_total,
        resynced_ops_total, resyncs_total, resync_seconds_total, denials_total, denials_by
        (tool, risk), refusals_total, refusals_by_type, conflicts_total, tombstoned_threads_total,
        tombstoned_ops_dropped_total.
        """
        return {"replica_id": self._shared.replica_id, **self._buffer.status(), "last_success": self._last_success(),
                "generation": self._postgres.generation, **self._recovery.status(), **self._health.totals()}

    def _last_success(self) -> datetime | None:
        return _ts(max(filter(None, (self._postgres.last_success_ts, self._health.last_success_ts)), default=None))

    def _live(self) -> dict[str, Any]:
        """The saver's state as the heartbeat row gives it."""
        return {**self._buffer.status(), "last_success": self._last_success()}

    def transitions(self) -> list[tuple[float, str]]:
        """(time.monotonic(), "healthy"|"degraded") for every state change, oldest first."""
        return self._buffer.transitions()

    def wait_for(self, state: str, timeout: float) -> bool:
        """Block until the saver is "healthy" (buffer resynced) or "degraded"; False on timeout."""
        return self._buffer.wait_for(state, timeout)

    def record_denial(self, denial: Any) -> None:
        """Keep a guard denial for the health tables (flushed on recovery)."""
        row = denial.as_row() if hasattr(denial, "as_row") else dict(denial)
        row.setdefault("key", str(uuid.uuid4()))
        metrics.denied(row.get("tool"), row.get("risk"))
        self._health.count_denial(row)
        if not self._buffer.keep_denial(row):
            self._health.add_denials([row])

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Replay the journal a previous close() of this replica id left (if PostgreSQL answers), start the monitor."""
        sh = self._shared
        if self._buffer.journal_pending:
            self._replay_journal()  # not replayed: the monitor retries
        if sh.monitor is None or not sh.monitor.is_alive():
            sh.stop.clear()
            sh.monitor = threading.Thread(target=self._monitor, name=f"dual-saver-monitor-{sh.replica_id}",
                                          daemon=True)
            sh.monitor.start()
        self._liveness.start()

    async def aclose_loop(self) -> None:
        """Close this event loop's async pool (call before the loop ends, e.g. in `asyncio.run`).

        The pool's tasks live on the loop; a loop shutting down with an open pool waits for them.
        """
        await self._postgres.aclose_loop()

    async def aclose(self) -> None:
        """`close()` plus closing this event loop's async pool on the loop itself."""
        await self.aclose_loop()
        await asyncio.to_thread(self.close)

    def __enter__(self) -> "SaverCore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def setup(self) -> None:
        """Create or migrate langgraph's checkpoint tables (core.migrate does this for the app), on a
        connection without the agents' statement_timeout (a migration of a big table takes longer)."""
        with psycopg.connect(self._shared.resync_dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
            PostgresSaver(conn).setup()

    # --- failures ---------------------------------------------------------------------------

    def _handle(self, exc: BaseException, config: RunnableConfig | None) -> None:
        """Degrade on a connection failure; re-raise anything else."""
        if isinstance(exc, SerializationRefused):
            if config is not None:
                thread_id, _, checkpoint_id = thread_of(config)
                exc.refusal.thread_id = exc.refusal.thread_id or thread_id
                exc.refusal.checkpoint_id = exc.refusal.checkpoint_id or checkpoint_id
            raise exc
        if not is_connection_failure(exc):
            raise exc
        self._degrade(_describe(exc))

    def _degrade(self, reason: str) -> None:
        """Switch to degraded (once per episode) and cut every PostgreSQL call still in flight."""
        sh = self._shared
        if not self._buffer.degrade(reason):
            return
        self._recovery.new_episode()
        sh.wake.set()
        cut = sh.watchdog.cut_all(f"PostgreSQL call cut: checkpoint persistence degraded ({reason})")
        log.warning("checkpoint persistence DEGRADED (replica %s): %s; %d call(s) in flight cut",
                    sh.replica_id, reason, cut)

    # --- monitor: heartbeat while healthy, probe + resync while degraded ---------------------

    def _monitor(self) -> None:
        sh = self._shared
        while not sh.stop.is_set():
            try:
                if self._buffer.degraded:
                    if not self._try_recover():
                        sh.stop.wait(sh.probe_interval)
                    continue
                if self._buffer.journal_pending:
                    self._replay_journal()
                self._buffer.learn_tombstones(self._health.poll_tombstones())
                if sh.publish_health:
                    self._health.flush()
                if sh.last_monitor_error is not None:
                    log.warning("dual saver monitor of replica %s works again (was: %s)", sh.replica_id,
                                sh.last_monitor_error)
                    sh.last_monitor_error = None  # cleared: the next error is logged again
            except Exception as exc:
                if is_connection_failure(exc):
                    self._degrade(_describe(exc))
                    continue
                # E.g. the health tables are missing (migration 003 not applied): said once while it
                # lasts, not every beat, and again if it comes back after it cleared.
                message = _describe(exc)
                if message != sh.last_monitor_error:
                    sh.last_monitor_error = message
                    log.exception("dual saver monitor error (repeats are not logged until it clears)")
            sh.wake.wait(sh.heartbeat_interval)
            sh.wake.clear()

    def _try_recover(self) -> bool:
        sh = self._shared
        episode = self._buffer.open_episode()
        if episode is None:
            return True
        if not self._recovery.probe(degraded_since=episode.since, buffered=self._buffer.status()["buffered_ops"]):
            return False
        if self._buffer.journal_pending and not self._replay_journal():  # older than this episode: first
            return False
        started = time.monotonic()
        if sh.publish_health:
            try:  # tell the SRE page we are back and resyncing, with what we hold
                self._health.publish_heartbeat("degraded")
            except Exception as exc:
                log.warning("heartbeat before resync not written: %s", _describe(exc))
        # Replay outside the buffer's lock while agents keep buffering, reading and checking status
        # (issue 16 #4): each round writes what the log held when it started; committed ops leave the
        # log. Once a round finds the log empty, the switch happens under the lock with no I/O.
        self._recovery.resyncing = True
        try:
            while True:
                batch = self._buffer.pending()
                if batch:
                    if time.monotonic() - started > sh.resync_timeout:
                        # Agents buffer faster than the rounds drain: stay degraded, retry at the next probe.
                        self._recovery.resync_failed(f"buffer not drained within {sh.resync_timeout:.0f} s")
                        log.warning("resync of replica %s did not drain the buffer within %.0f s (%d operations "
                                    "left, kept)", sh.replica_id, sh.resync_timeout, len(batch))
                        return False
                    try:
                        erased = self._recovery.replay(batch, since=episode.since, tombstoned=self._buffer.tombstoned())
                    except Exception as exc:
                        self._recovery.resync_failed(_describe(exc))
                        log.warning("resync of %d buffered operations failed (kept): %s", len(batch), _describe(exc))
                        return False
                    self._buffer.learn_tombstones(erased)
                    self._buffer.committed(len(batch))
                    continue
                # Fresh pools first (agents use none while degraded), then the switch, with no I/O under the lock.
                self._postgres.reconnect()
                self._health.reconnect()

                def switch(ended: BufferedEpisode) -> None:  # counted before anyone sees the saver healthy
                    seconds = time.monotonic() - started
                    self._recovery.resynced(ended.resynced, seconds)
                    self._health.record_episode(self._episode(ended, ops_resynced=ended.resynced,
                                                              resync_ms=seconds * 1000))

                ended = self._buffer.leave(switch)
                if ended is not None:
                    break
        finally:
            self._recovery.resyncing = False
        ms = self._recovery.last_resync_ms or 0.0
        log.warning("checkpoint persistence RECOVERED (replica %s): %d operations resynced in %.0f ms",
                    sh.replica_id, ended.resynced, ms)
        metrics.resynced(ended.resynced, ms / 1000)
        if sh.publish_health:
            try:
                self._health.flush()
            except Exception as exc:
                log.warning("health flush after recovery failed (kept for the next heartbeat): %s", _describe(exc))
        return True

    def _episode(self, episode: BufferedEpisode, *, ops_resynced: int, resync_ms: float) -> replica_health.Episode:
        """The row of a degradation episode of this replica, ending now."""
        sh = self._shared
        now = sh.now()
        return replica_health.Episode(
            replica_id=sh.replica_id, host=sh.host, pid=sh.pid, degraded_from=episode.since or now, degraded_to=now,
            reason=episode.reason, checkpoints_buffered=episode.checkpoints, writes_buffered=episode.writes,
            ops_resynced=ops_resynced, resync_ms=resync_ms, denials=list(episode.denials))
