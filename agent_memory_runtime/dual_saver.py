"""Dual checkpoint saver: PostgreSQL first, an in-memory buffer while PostgreSQL is unreachable.

`DualCheckpointSaver` writes through langgraph's `PostgresSaver` (sync) and `AsyncPostgresSaver`
(async, on an `AsyncConnectionPool` of each event loop). Only "PostgreSQL is gone" degrades it:
connection failures (operational errors of the connection classes, pool timeouts, closed
connections) and a failed liveness check (`SELECT 1` on a connection of its own every 0.5 s, 1 s
deadline). "PostgreSQL is slow" does not: every saver connection carries a server-side
statement_timeout and lock_timeout, and a call past them fails with a query error raised to the
caller, like data errors and serializer refusals; waiting for the saver's own lock counts for
nothing. A call on a pooled connection to a *hung* server blocks until the server resumes whatever
the pool timeout or keepalives say, so when the liveness check finds PostgreSQL gone the watchdog
shuts down the socket of every call in flight, and psycopg raises at once (sync calls run in the
caller's thread, async ones in their task: no hand-off on the hot path; cancelling psycopg's call on
a hung server would itself wait ~10 s for its cancel request).

Degraded, it keeps serving: writes go to the buffer and its ordered log of operations; reads see
what was buffered plus what this process last knew PostgreSQL had. The monitor probes and, once
PostgreSQL answers, replays the log in rounds (PostgresSaver's upserts, and each operation's id claimed
in PostgreSQL in the replay's transaction, make a replay apply nothing twice; a buffered delete deletes
only what it meant), opens fresh pools, and only then returns to normal. A failed resync keeps everything; a close
while PostgreSQL is gone journals it; nothing is dropped. On recovery the degradation episode, the
fail-closed guard's denials and the serializer's refusals go to the health tables
(`agent_memory_runtime.replica_health`).

The saver owns its collaborators and routes between them; none of them knows another:
- `WrappedSavers` (wrapped_savers.py): the PostgresSaver / AsyncPostgresSaver and their pools;
- `DegradedBuffer` (degraded_buffer.py): healthy or degraded, the episode, the read cache
  (read_cache.py), the memory buffer, the resync log and its journal (journal.py);
- `Liveness` (liveness.py): the thread that decides PostgreSQL is gone;
- `Recovery` (recovery.py): the probe, the replay of the log, the thread fates (thread_fates.py);
- `HealthPublisher` (health_publisher.py): heartbeat, episodes, denials, refusals, tombstones;
- `Monitor` (monitor.py): the thread that beats while healthy and recovers while degraded;
and the watchdog (deadlines.py) that cuts calls. `StateGraph.compile` may clone the saver with
`with_allowlist`: the clone shares the collaborators, and its wrapped savers and memory buffer use
the clone's serializer.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import socket
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
)
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.postgres.base import BasePostgresSaver
from langgraph.checkpoint.serde.base import SerializerProtocol, maybe_add_typed_methods
from psycopg.rows import dict_row

from agent_memory_runtime import metrics, replica_health
from agent_memory_runtime.deadlines import _Watchdog
from agent_memory_runtime.degraded_buffer import BufferedEpisode, DegradedBuffer
from agent_memory_runtime.failures import (  # noqa: F401 - re-exported: imported from here by callers
    CALL_TIMEOUT_S,
    CLOSE_RESYNC_TIMEOUT_S,
    CONNECTION_SQLSTATE_PREFIXES,
    HEARTBEAT_INTERVAL_S,
    LIVENESS_INTERVAL_S,
    LIVENESS_TIMEOUT_S,
    LOCK_TIMEOUT_S,
    MAX_BUFFERED_OPS,
    POOL_SIZE,
    PROBE_CONNECT_TIMEOUT_S,
    PROBE_INTERVAL_S,
    RESYNC_TIMEOUT_S,
    STATEMENT_TIMEOUT_S,
    THREAD_CACHE_SIZE,
    BufferFull,
    CheckpointUnavailable,
    DeadlineExceeded,
    _describe,
    _now,
    _ts,
    is_connection_failure,
    session_dsn,
)
from agent_memory_runtime.health_publisher import HealthPublisher
from agent_memory_runtime.journal import Journal, default_journal_dir
from agent_memory_runtime.liveness import Liveness
from agent_memory_runtime.monitor import Monitor
from agent_memory_runtime.read_cache import thread_of
from agent_memory_runtime.recovery import Recovery
from agent_memory_runtime.serde import AllowlistSerializer, RefusalLog, SerializationRefused
from agent_memory_runtime.wrapped_savers import WrappedSavers

log = logging.getLogger("agent_memory_runtime.dual_saver")


def production_dsn_configured() -> bool:
    """PG_AGENTES is set in the environment: the agents run on a production database, not the embedded demo."""
    return os.environ.get("PG_AGENTES") not in (None, "")


_OPEN: weakref.WeakSet[DualCheckpointSaver] = weakref.WeakSet()  # started, not closed


def _close_on_sigterm(saver: DualCheckpointSaver) -> None:
    """A SIGTERM (Kubernetes stopping the pod) closes every open saver (final resync, or the journal),
    then ends the process as SIGTERM does. Installed from the main thread when SIGTERM has no handler
    yet; a program with its own handler calls `close()` from it."""
    _OPEN.add(saver)
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        return

    def handler(signum: int, frame: Any) -> None:
        for open_saver in list(_OPEN):
            open_saver.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)


def refuse_on_event_loop() -> None:
    """The sync API blocks: on an event loop's thread it would stall every task (langgraph's rule)."""
    if asyncio._get_running_loop() is None:  # (asyncio.events.__all__; get_running_loop raises when there is none)
        return
    raise asyncio.InvalidStateError(
        "Synchronous calls to DualCheckpointSaver are only allowed from a thread without a running event "
        "loop; use the async API (ainvoke, aget_tuple, ...) or asyncio.to_thread."
    )


class DualCheckpointSaver(BaseCheckpointSaver[str]):
    """PostgreSQL checkpoints with an in-memory fallback, resync and replica health.

    `dsn` is the agents' database (migrated: checkpoint tables and 003_replica_health). The monitor
    and liveness threads start with the saver (not with `start=False`); `close()` (or the context
    manager) stops them. Give it a stable `replica_id` (its journal is found by it after a restart); with
    PG_AGENTES set (production) it refuses to start without one.
    Degraded, it buffers up to `max_buffered_ops` operations, then refuses more (`BufferFull`).
    """

    _ids = itertools.count(1)

    def __init__(
        self,
        dsn: str,
        *,
        serde: SerializerProtocol | None = None,
        replica_id: str | None = None,
        call_timeout: float = CALL_TIMEOUT_S,
        heartbeat_interval: float = HEARTBEAT_INTERVAL_S,
        probe_interval: float = PROBE_INTERVAL_S,
        pool_size: int = POOL_SIZE,
        thread_cache_size: int = THREAD_CACHE_SIZE,
        max_buffered_ops: int = MAX_BUFFERED_OPS,
        resync_timeout: float = RESYNC_TIMEOUT_S,
        publish_health: bool = True,
        start: bool = True,
        close_resync_timeout: float = CLOSE_RESYNC_TIMEOUT_S,
        journal_dir: str | Path | None = None,
        liveness_interval: float = LIVENESS_INTERVAL_S,
        liveness_timeout: float = LIVENESS_TIMEOUT_S,
        statement_timeout: float | None = STATEMENT_TIMEOUT_S,
        lock_timeout: float | None = LOCK_TIMEOUT_S,
        clock: Callable[[], datetime] | None = None,
    ):
        # Not BaseCheckpointSaver.__init__: `serde` is a property that also re-targets the wrapped savers.
        if replica_id is None and production_dsn_configured():
            raise ValueError(
                "DualCheckpointSaver needs an explicit replica_id in production (PG_AGENTES is set): what a "
                "replica buffers while PostgreSQL is unreachable is journaled under its replica id and replayed by "
                "the next start with the same id, and a default id (host:pid) never matches after a restart, so "
                "that journal would never be replayed. Give each replica a stable replica_id (e.g. the pod name of "
                "a StatefulSet); nothing was started"
            )
        self._host, self._pid = socket.gethostname(), os.getpid()
        self._replica_id = replica_id or f"{self._host}:{self._pid}:{next(self._ids)}"
        if replica_id is None:
            log.warning(
                "dual saver without a replica_id: %s is used, which no restart matches, so what it "
                "journals while PostgreSQL is unreachable is never replayed; give each replica a stable "
                "replica_id (e.g. the pod name of a StatefulSet)",
                self._replica_id,
            )
        # The time episodes and heartbeats carry: real time, or the demo's ManualClock (agent_memory_runtime.clock).
        self._now = clock or _now
        self._call_timeout = call_timeout
        self._probe_interval = probe_interval
        self._resync_timeout = resync_timeout
        self._close_resync_timeout = close_resync_timeout
        self._publish_health = publish_health
        # Every connection of the saver gets the server-side statement/lock timeouts and TCP settings, but
        # the replay's and setup()'s: TCP settings only (the replay is bounded by resync_timeout).
        session = session_dsn(dsn, statement_timeout, lock_timeout)
        self._resync_dsn = session_dsn(dsn, None, None)
        self._watchdog = _Watchdog(f"dual-saver-watchdog-{self._replica_id}")
        serde = maybe_add_typed_methods(serde if serde is not None else AllowlistSerializer(refusals=RefusalLog()))
        journal = Journal(
            Path(journal_dir) if journal_dir is not None else default_journal_dir(), self._replica_id, dsn
        )
        self._buffer = DegradedBuffer(
            serde, thread_cache_size=thread_cache_size, max_ops=max_buffered_ops, journal=journal, now=self._now
        )

        def is_degraded() -> bool:  # what the wrapped savers, the liveness check and the monitor ask
            return self._buffer.degraded

        self._postgres = WrappedSavers(
            session,
            serde=serde,
            replica_id=self._replica_id,
            pool_size=pool_size,
            call_timeout=call_timeout,
            watchdog=self._watchdog,
            is_degraded=is_degraded,
        )
        self._liveness = Liveness(
            session,
            replica_id=self._replica_id,
            interval=liveness_interval,
            timeout=liveness_timeout,
            watchdog=self._watchdog,
            is_degraded=is_degraded,
            on_gone=self._degrade,
        )
        self._recovery = Recovery(
            session,
            self._resync_dsn,
            replica_id=self._replica_id,
            call_timeout=call_timeout,
            resync_timeout=resync_timeout,
            watchdog=self._watchdog,
        )
        self._health = HealthPublisher(
            session,
            replica_id=self._replica_id,
            host=self._host,
            pid=self._pid,
            started_at=self._now(),
            heartbeat_interval=heartbeat_interval,
            call_timeout=call_timeout,
            watchdog=self._watchdog,
            watched=lambda: self._liveness.running,
            live=self._live,
        )
        self._monitor = Monitor(
            replica_id=self._replica_id,
            heartbeat_interval=heartbeat_interval,
            probe_interval=probe_interval,
            is_degraded=is_degraded,
            beat=self._beat,
            recover=self._recover,
            on_gone=self._degrade,
        )
        self.serde = serde
        if start:
            self.start()

    # --- serializer: the wrapped savers and the memory buffer always use ours --------------------

    @property
    def serde(self) -> SerializerProtocol:
        return self._serde

    @serde.setter
    def serde(self, value: SerializerProtocol) -> None:
        # Also called on a `copy.copy` clone by `with_allowlist`: the clone gets its own views.
        self._serde = maybe_add_typed_methods(value)
        self._postgres = self._postgres.with_serde(self._serde)
        self._buffer = self._buffer.with_serde(self._serde)
        refusals = getattr(value, "refusals", None)
        if isinstance(refusals, RefusalLog):
            self._health.watch_refusals(refusals)

    # --- live state (the guard reads it at every tool call) ---------------------------------------

    @property
    def degraded(self) -> bool:
        return self._buffer.degraded

    @property
    def replica_id(self) -> str:
        return self._replica_id

    def status(self) -> dict[str, Any]:
        """Live state and counters (the Degradation page, the guard, a Prometheus collector).

        Gauges: state, resyncing (degraded, the buffer is being replayed), degraded_since /
        degraded_seconds, buffered_ops / buffered_checkpoints / buffered_writes (this episode),
        last_resync_ms. Monotonic counters: episodes_total, resynced_ops_total, resyncs_total,
        resync_seconds_total, denials_total, denials_by (tool, risk), refusals_total, refusals_by_type,
        conflicts_total (buffered turns diverted, buffered deletes not applied), tombstoned_threads_total,
        tombstoned_ops_dropped_total, already_applied_total (skipped on replay: committed before a crash).
        """
        return {
            "replica_id": self._replica_id,
            **self._buffer.status(),
            "last_success": self._last_success(),
            "generation": self._postgres.generation,
            **self._recovery.status(),
            **self._health.totals(),
        }

    def transitions(self) -> list[tuple[float, str]]:
        """(time.monotonic(), "healthy"|"degraded") for every state change, oldest first."""
        return self._buffer.transitions()

    def wait_for(self, state: str, timeout: float) -> bool:
        """Block until the saver is "healthy" (buffer resynced) or "degraded"; False on timeout."""
        return self._buffer.wait_for(state, timeout)

    def record_denial(self, denial: Any) -> None:
        """Keep a guard denial for the health tables (with the open episode, flushed on recovery)."""
        row = denial.as_row() if hasattr(denial, "as_row") else dict(denial)
        row.setdefault("key", str(uuid.uuid4()))
        metrics.denied(row.get("tool"), row.get("risk"))
        self._health.count_denial(row)
        if not self._buffer.keep_denial(row):
            self._health.add_denials([row])

    def _last_success(self) -> datetime | None:
        return _ts(max(filter(None, (self._postgres.last_success_ts, self._health.last_success_ts)), default=None))

    def _live(self) -> dict[str, Any]:
        """The saver's state as the heartbeat row gives it."""
        return {**self._buffer.status(), "last_success": self._last_success()}

    # --- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Replay the journal a previous close() of this replica id left (if PostgreSQL answers), start the
        monitor and the liveness check."""
        if self._buffer.journal_pending:
            self._replay_journal()  # not replayed: the monitor retries
        _close_on_sigterm(self)
        self._monitor.start()
        self._liveness.start()

    def close(self) -> None:
        """Stop the threads, resync or journal the buffer, publish a last heartbeat, close the pools.

        Degraded, it tries a final resync for up to `close_resync_timeout` seconds; if PostgreSQL is
        still unreachable, the buffer goes to the local journal (`agent_memory_runtime.journal`, logged
        at ERROR), which the next start with the same replica id replays. Nothing is dropped
        (issue 16 #2). Closing twice is harmless.
        """
        metrics.unregister(self)
        _OPEN.discard(self)
        if self._monitor.stopped:
            return
        self._liveness.stop(timeout=self._call_timeout + 2)
        self._monitor.stop(timeout=self._call_timeout + 2)
        if self._buffer.degraded:
            self._final_resync()
        if not self._buffer.degraded and self._publish_health:
            try:
                self._health.flush(state="stopped")
            except Exception as exc:  # closing must not fail because PostgreSQL is gone
                log.warning("last heartbeat not written: %s", _describe(exc))
        self._journal_unsaved()  # whatever PostgreSQL still lacks (nothing, normally)
        self._postgres.close()
        self._health.close()
        self._watchdog.stop()

    async def aclose_loop(self) -> None:
        """Close this event loop's async pool (call before the loop ends, e.g. in `asyncio.run`).

        The pool's tasks live on the loop; a loop shutting down with an open pool waits for them.
        """
        await self._postgres.aclose_loop()

    async def aclose(self) -> None:
        """`close()` plus closing this event loop's async pool on the loop itself."""
        await self.aclose_loop()
        await asyncio.to_thread(self.close)

    def __enter__(self) -> DualCheckpointSaver:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def setup(self) -> None:
        """Create or migrate langgraph's checkpoint tables (core.migrate does this for the app), on a
        connection without the agents' statement_timeout (a migration of a big table takes longer)."""
        with psycopg.connect(self._resync_dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
            PostgresSaver(conn).setup()

    # --- routing: failures, the monitor's beat and recovery, the journal ------------------------------

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
        """PostgreSQL is gone: degrade (once per episode), cut every call still in flight, wake the monitor."""
        if not self._buffer.degrade(reason):
            return
        self._recovery.new_episode()
        self._monitor.wake()
        cut = self._watchdog.cut_all(f"PostgreSQL call cut: checkpoint persistence degraded ({reason})")
        log.warning(
            "checkpoint persistence DEGRADED (replica %s): %s; %d call(s) in flight cut", self._replica_id, reason, cut
        )

    def _beat(self) -> None:
        """The monitor's work while healthy: a journal left to replay, the tombstones, the health rows."""
        if self._buffer.journal_pending:
            self._replay_journal()
        self._buffer.learn_tombstones(self._health.poll_tombstones())
        if self._publish_health:
            self._health.flush()

    def _recover(self) -> bool:
        """The monitor's work while degraded: probe; once PostgreSQL answers, resync the buffer in rounds
        outside its lock while agents keep buffering, reading and checking status (issue 16 #4). Each
        round writes what the log held when it started; once a round finds it empty, fresh pools, and
        the switch under the buffer's lock with no I/O. True once healthy."""
        episode = self._buffer.open_episode()
        if episode is None:
            return True
        if not self._recovery.probe(degraded_since=episode.since, buffered=self._buffer.status()["buffered_ops"]):
            return False
        if self._buffer.journal_pending and not self._replay_journal():  # older than this episode: first
            return False
        started = time.monotonic()
        if self._publish_health:
            try:  # tell the SRE page we are back and resyncing, with what we hold
                self._health.publish_heartbeat("degraded")
            except Exception as exc:
                log.warning("heartbeat before resync not written: %s", _describe(exc))

        def switch(ended: BufferedEpisode) -> None:  # counted before anyone sees the saver healthy
            seconds = time.monotonic() - started
            self._recovery.resynced(ended.resynced, seconds)
            self._health.record_episode(self._episode(ended, ops_resynced=ended.resynced, resync_ms=seconds * 1000))

        self._recovery.resyncing = True
        try:
            ended = None
            while ended is None:
                batch = self._buffer.pending()
                if batch:
                    if time.monotonic() - started > self._resync_timeout:
                        # Agents buffer faster than the rounds drain: stay degraded, retry at the next probe.
                        self._recovery.resync_failed(f"buffer not drained within {self._resync_timeout:.0f} s")
                        log.warning(
                            "resync of replica %s did not drain the buffer within %.0f s (%d operations left, kept)",
                            self._replica_id,
                            self._resync_timeout,
                            len(batch),
                        )
                        return False
                    try:
                        try:
                            erased = self._recovery.replay(
                                batch, since=episode.since, tombstoned=self._buffer.tombstoned()
                            )
                        except Exception as exc:
                            if is_connection_failure(exc):
                                raise
                            erased = self._replay_one_by_one(batch, since=episode.since)
                    except Exception as exc:
                        self._recovery.resync_failed(_describe(exc))
                        log.warning("resync of %d buffered operations failed (kept): %s", len(batch), _describe(exc))
                        return False
                    self._buffer.learn_tombstones(erased)
                    self._buffer.committed(len(batch))
                    continue
                self._postgres.reconnect()  # agents use no pool while degraded
                self._health.reconnect()
                ended = self._buffer.leave(switch)  # None: operations came in meanwhile, one more round
        finally:
            self._recovery.resyncing = False
        ms = self._recovery.last_resync_ms or 0.0
        log.warning(
            "checkpoint persistence RECOVERED (replica %s): %d operations resynced in %.0f ms",
            self._replica_id,
            ended.resynced,
            ms,
        )
        metrics.resynced(ended.resynced, ms / 1000)
        if self._publish_health:
            try:
                self._health.flush()
            except Exception as exc:
                log.warning("health flush after recovery failed (kept for the next heartbeat): %s", _describe(exc))
        return True

    def _replay_one_by_one(self, batch: list[Any], *, since: datetime | None, episode: bool = True) -> set[str]:
        """PostgreSQL refused the batch, not for want of a connection: replay it operation by operation and
        move each operation it refuses to the dead letters, so the rest goes through. A connection failure
        (or a dead letter not written) raises: the batch is kept."""
        erased: set[str] = set()
        dead = 0
        for op in batch:
            try:
                erased |= self._recovery.replay(
                    [op], since=since, tombstoned=self._buffer.tombstoned() | erased, episode=episode
                )
            except Exception as exc:
                if is_connection_failure(exc):
                    raise
                self._recovery.dead_letter(op, exc)
                dead += 1
        metrics.dead_lettered(dead)
        return erased

    def _episode(self, episode: BufferedEpisode, *, ops_resynced: int, resync_ms: float) -> replica_health.Episode:
        """The row of a degradation episode of this replica, ending now."""
        now = self._now()
        return replica_health.Episode(
            replica_id=self._replica_id,
            host=self._host,
            pid=self._pid,
            degraded_from=episode.since or now,
            degraded_to=now,
            reason=episode.reason,
            checkpoints_buffered=episode.checkpoints,
            writes_buffered=episode.writes,
            ops_resynced=ops_resynced,
            resync_ms=resync_ms,
            denials=list(episode.denials),
        )

    def _final_resync(self) -> None:
        """Try to resync the buffer until `close_resync_timeout` has passed (monitor already stopped)."""
        deadline = time.monotonic() + self._close_resync_timeout
        while self._buffer.degraded and time.monotonic() < deadline:
            if self._recover():
                return
            time.sleep(min(self._probe_interval, max(0.0, deadline - time.monotonic()), 0.2))

    def _journal_unsaved(self) -> None:
        """Append what PostgreSQL does not have yet (the resync log, the open episode, unflushed health
        rows) to the journal, fsynced, and say so at ERROR."""
        episodes, denials = self._health.unsaved()
        open_episode = self._buffer.open_episode()
        if open_episode is not None:
            episodes.append(self._episode(open_episode, ops_resynced=0, resync_ms=0.0))
        record = self._buffer.closing_record(episodes=[dict(e.__dict__) for e in episodes], denials=denials)
        if record is None:
            return
        status = self._buffer.status()
        buffered = status["buffered_ops"] if status["state"] == "degraded" else 0
        what = (
            f"{buffered} operations ({status['buffered_checkpoints'] if buffered else 0} checkpoints, "
            f"{status['buffered_writes'] if buffered else 0} writes), {len(record['episodes'])} degradation "
            f"episodes, {len(record['denials']) + sum(len(e['denials']) for e in record['episodes'])} guard denials"
        )
        journal = self._buffer.journal_path
        try:
            self._buffer.journal(record)
        except Exception as exc:
            log.error(
                "replica %s closed while PostgreSQL is unreachable: %s; its episodes and denials are LOST "
                "(journal %s not written: %s)",
                self._replica_id,
                what,
                journal,
                _describe(exc),
            )
            return
        self._health.forget_unsaved()
        log.error(
            "replica %s closed while PostgreSQL is unreachable: %s not saved to PostgreSQL; kept in the "
            "journal %s, replayed by the next start of replica %s",
            self._replica_id,
            what,
            journal,
            self._replica_id,
        )

    def _replay_journal(self) -> bool:
        """Replay the journal of this replica id, if any, then remove it; False if PostgreSQL refused."""
        records = self._buffer.journaled()
        if not records:
            return True
        started = time.monotonic()
        try:  # one replay per episode: the write-ahead records of an episode hold one operation each
            for since, group in itertools.groupby(records, key=lambda r: r["since"]):
                ops = [op for r in group for op in r["ops"]]
                try:
                    erased = self._recovery.replay(
                        ops, since=since, tombstoned=self._buffer.tombstoned(), episode=False
                    )
                except Exception as exc:
                    if is_connection_failure(exc):
                        raise
                    erased = self._replay_one_by_one(ops, since=since, episode=False)
                self._buffer.learn_tombstones(erased)
        except Exception as exc:
            log.warning(
                "journal %s of replica %s not replayed yet (kept, retried): %s",
                self._buffer.journal_path,
                self._replica_id,
                _describe(exc),
            )
            return False
        ops_of: dict[Any, int] = {}
        for record in records:
            ops_of[record["since"]] = ops_of.get(record["since"], 0) + len(record["ops"])
        for record in records:
            for episode in record["episodes"]:
                if episode["ops_resynced"] == 0:
                    episode["ops_resynced"] = ops_of.get(episode["degraded_from"], 0)
                    episode["resync_ms"] = (time.monotonic() - started) * 1000
                self._health.record_episode(replica_health.Episode(**episode))
            self._health.add_denials(record["denials"])
        replayed = sum(len(r["ops"]) for r in records)
        self._recovery.journal_replayed(replayed)
        self._buffer.journal_replayed()
        log.warning(
            "replica %s replayed its journal: %d operations from %d closes while PostgreSQL was unreachable",
            self._replica_id,
            replayed,
            len(records),
        )
        if self._publish_health:
            try:
                self._health.flush()
            except Exception as exc:  # kept in memory for the next heartbeat
                log.warning(
                    "health flush after the journal replay failed (kept for the next heartbeat): %s", _describe(exc)
                )
        return True

    # --- sync API ---------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        refuse_on_event_loop()
        if not self._buffer.degraded:  # the common case, kept short
            try:
                with metrics.timed("postgres", "get"):
                    found = self._postgres.call(lambda pg: pg.get_tuple(config))
            except Exception as exc:
                self._handle(exc, config)
            else:
                if found is not None and not config["configurable"].get("checkpoint_id"):
                    self._buffer.remember(found)
                return found
        for _ in range(3):
            if not self._buffer.degraded:
                try:
                    found = self._postgres.call(lambda pg: pg.get_tuple(config))
                except Exception as exc:
                    self._handle(exc, config)
                else:
                    if not get_checkpoint_id(config):
                        self._buffer.remember(found)
                    return found
            if self._buffer.degraded:
                with metrics.timed("memory", "get"):
                    found = self._buffer.get_tuple(config)
                if self._buffer.degraded or found is not None:
                    return found
        raise CheckpointUnavailable("checkpoint persistence flapping: read not served")

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        refuse_on_event_loop()
        kwargs: dict[str, Any] = {"filter": filter, "before": before, "limit": limit}
        for _ in range(3):
            if not self._buffer.degraded:
                try:
                    found = self._postgres.call(lambda pg: list(pg.list(config, **kwargs)))
                except Exception as exc:
                    self._handle(exc, config)
                else:
                    yield from found
                    return
            buffered = self._buffer.list(config, **kwargs)
            if buffered is not None:
                yield from buffered
                return
        raise CheckpointUnavailable("checkpoint persistence flapping: list not served")

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        refuse_on_event_loop()
        for _ in range(3):
            if not self._buffer.degraded:
                try:
                    with metrics.timed("postgres", "put"):
                        next_config = self._postgres.call(lambda pg: pg.put(config, checkpoint, metadata, new_versions))
                except Exception as exc:
                    self._handle(exc, config)
                else:
                    self._buffer.remember_put(config, checkpoint, metadata, next_config)
                    return next_config
            with metrics.timed("memory", "put"):
                done, next_config = self._buffer.put(config, checkpoint, metadata, new_versions)
            if done:
                return next_config
        raise CheckpointUnavailable("checkpoint persistence flapping: put not stored")

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        refuse_on_event_loop()
        for _ in range(3):
            if not self._buffer.degraded:
                try:
                    self._postgres.call(lambda pg: pg.put_writes(config, writes, task_id, task_path))
                except Exception as exc:
                    self._handle(exc, config)
                else:
                    self._buffer.remember_writes(config, writes, task_id)
                    return
            done, _ = self._buffer.put_writes(config, writes, task_id, task_path)
            if done:
                return
        raise CheckpointUnavailable("checkpoint persistence flapping: writes not stored")

    def delete_thread(self, thread_id: str) -> None:
        refuse_on_event_loop()
        for _ in range(3):
            if not self._buffer.degraded:
                try:
                    self._postgres.call(lambda pg: pg.delete_thread(thread_id))
                except Exception as exc:
                    self._handle(exc, None)
                else:
                    self._buffer.forget_thread(thread_id)
                    return
            done, _ = self._buffer.delete_thread(thread_id)
            if done:
                return
        raise CheckpointUnavailable("checkpoint persistence flapping: delete not applied")

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune in PostgreSQL. Refused (CheckpointUnavailable) while degraded: nothing is deleted."""
        refuse_on_event_loop()
        if self._buffer.degraded:
            raise CheckpointUnavailable("prune needs PostgreSQL, which is unreachable; retry when healthy")
        try:
            self._postgres.call(lambda pg: pg.prune(thread_ids, strategy=strategy))
        except Exception as exc:
            self._handle(exc, None)
            raise CheckpointUnavailable("prune needs PostgreSQL, which became unreachable; retry when healthy") from exc
        for thread_id in thread_ids:
            self._buffer.forget_thread(thread_id)

    def get_next_version(self, current: str | None, channel: None) -> str:
        return BasePostgresSaver.get_next_version(self, current, channel)  # type: ignore[arg-type]

    # --- async API (native: AsyncPostgresSaver on this loop's async pool) -----------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        for _ in range(3):
            if not self._buffer.degraded:
                try:
                    found = await self._postgres.acall(lambda apg: apg.aget_tuple(config))
                except Exception as exc:
                    self._handle(exc, config)
                else:
                    if not get_checkpoint_id(config):
                        self._buffer.remember(found)
                    return found
            if self._buffer.degraded:
                found = self._buffer.get_tuple(config)
                if self._buffer.degraded or found is not None:
                    return found
        raise CheckpointUnavailable("checkpoint persistence flapping: read not served")

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        kwargs: dict[str, Any] = {"filter": filter, "before": before, "limit": limit}

        async def collect(apg: AsyncPostgresSaver) -> list[CheckpointTuple]:
            return [t async for t in apg.alist(config, **kwargs)]

        for _ in range(3):
            if not self._buffer.degraded:
                try:
                    found = await self._postgres.acall(collect)
                except Exception as exc:
                    self._handle(exc, config)
                else:
                    for tup in found:
                        yield tup
                    return
            buffered = self._buffer.list(config, **kwargs)
            if buffered is not None:
                for tup in buffered:
                    yield tup
                return
        raise CheckpointUnavailable("checkpoint persistence flapping: list not served")

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        for _ in range(3):
            if not self._buffer.degraded:
                try:
                    next_config = await self._postgres.acall(
                        lambda apg: apg.aput(config, checkpoint, metadata, new_versions)
                    )
                except Exception as exc:
                    self._handle(exc, config)
                else:
                    self._buffer.remember_put(config, checkpoint, metadata, next_config)
                    return next_config
            done, next_config = self._buffer.put(config, checkpoint, metadata, new_versions)
            if done:
                return next_config
        raise CheckpointUnavailable("checkpoint persistence flapping: put not stored")

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        for _ in range(3):
            if not self._buffer.degraded:
                try:
                    await self._postgres.acall(lambda apg: apg.aput_writes(config, writes, task_id, task_path))
                except Exception as exc:
                    self._handle(exc, config)
                else:
                    self._buffer.remember_writes(config, writes, task_id)
                    return
            done, _ = self._buffer.put_writes(config, writes, task_id, task_path)
            if done:
                return
        raise CheckpointUnavailable("checkpoint persistence flapping: writes not stored")

    async def adelete_thread(self, thread_id: str) -> None:
        for _ in range(3):
            if not self._buffer.degraded:
                try:
                    await self._postgres.acall(lambda apg: apg.adelete_thread(thread_id))
                except Exception as exc:
                    self._handle(exc, None)
                else:
                    self._buffer.forget_thread(thread_id)
                    return
            done, _ = self._buffer.delete_thread(thread_id)
            if done:
                return
        raise CheckpointUnavailable("checkpoint persistence flapping: delete not applied")

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune in PostgreSQL. Refused (CheckpointUnavailable) while degraded: nothing is deleted."""
        if self._buffer.degraded:
            raise CheckpointUnavailable("prune needs PostgreSQL, which is unreachable; retry when healthy")
        try:
            await self._postgres.acall(lambda apg: apg.aprune(thread_ids, strategy=strategy))
        except Exception as exc:
            self._handle(exc, None)
            raise CheckpointUnavailable("prune needs PostgreSQL, which became unreachable; retry when healthy") from exc
        for thread_id in thread_ids:
            self._buffer.forget_thread(thread_id)
