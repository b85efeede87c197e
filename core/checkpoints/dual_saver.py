"""Dual checkpoint saver: PostgreSQL first, an in-memory buffer while PostgreSQL is unreachable.

`DualCheckpointSaver` writes through langgraph's `PostgresSaver` (sync) and `AsyncPostgresSaver`
(async, on an `AsyncConnectionPool` of each event loop). Only connection failures degrade it
(operational errors of the connection classes, pool timeouts, closed connections, a call past
its deadline); data errors and serializer refusals still raise. Every PostgreSQL call has a
deadline, because a call on a pooled connection to a *hung* server blocks until the server
resumes whatever the pool timeout or keepalives say. Sync calls run in the caller's thread: the
saver's lock and the pool wait at most until the deadline, and a watchdog thread shuts down the
socket of a call still blocked at its deadline, so psycopg raises at once (handing every call to
a worker thread and abandoning it instead cost 10-30 % of a `get_tuple` here, see BENCHMARKS.md).
Async calls work the same way inside their task (the saver's asyncio lock is awaited with
`asyncio.wait_for` only when contended; cancelling psycopg's call on a hung server would itself
wait ~10 s for its cancel request, cutting the socket does not).

Degraded, it keeps serving: writes go to an `InMemorySaver` and to an ordered log of operations;
reads see what was buffered plus what this process last knew PostgreSQL had (the latest
checkpoint of each recent thread, kept while healthy). A background monitor probes with a
direct connection (short connect timeout) and, once PostgreSQL answers, opens a fresh pool
(the pool's own reconnect backoff takes tens of seconds), replays the log in order in one
transaction (PostgresSaver's upserts make the replay idempotent), and only after the commit
clears the buffer and returns to normal. A failed resync keeps everything; nothing is dropped.

The monitor also publishes this replica's heartbeat every few seconds and, on recovery, the
degradation episode with the fail-closed guard's denials and the serializer's refusals
(`core.replica_health`). `StateGraph.compile` may clone the saver with `with_allowlist`: the
clone shares the state and buffer, and the wrapped savers get the clone's serializer.
"""
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import itertools
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.postgres.base import BasePostgresSaver
from langgraph.checkpoint.serde.base import SerializerProtocol, maybe_add_typed_methods
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolClosed, PoolTimeout

from core.checkpoints import replica_health
from core.db import CONNECT_TIMEOUT_S, POOL_TIMEOUT_S, make_pool
from core.checkpoints.serde import AllowlistSerializer, RefusalLog, SerializationRefused

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 2.0  # a PostgreSQL call taking longer counts as an outage (hung server)
HEARTBEAT_INTERVAL_S = 2.0
PROBE_INTERVAL_S = 0.2  # while degraded
PROBE_CONNECT_TIMEOUT_S = 1
RESYNC_TIMEOUT_S = 15.0
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


class _Call:
    """One PostgreSQL call under a deadline; `conn` is the connection it is using right now."""

    __slots__ = ("deadline", "conn", "expired")

    def __init__(self, deadline: float):
        self.deadline = deadline
        self.conn: Any = None
        self.expired = False


# The deadline-bound call running in this thread or task (None outside one).
_current_call: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("dual_saver_call", default=None)


class _Watchdog:
    """Gives PostgreSQL calls a deadline by cutting the socket of a call that overstays it.

    The call runs in the caller's own thread or task (no hand-off, so no cost on the hot path);
    the watchdog thread `shutdown()`s the socket of the connection an overdue call is blocked
    on, which makes psycopg raise at once, whether the server is hung or just slow. The
    connection is then broken and the pool discards it. A daemon thread, checking every 50 ms.
    """

    TICK_S = 0.05

    def __init__(self, name: str):
        self._lock = threading.Lock()
        self._calls: set[_Call] = set()
        self._name = name
        self._thread: threading.Thread | None = None

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def deadline(self, seconds: float) -> "_Deadline":
        """`with watchdog.deadline(s):` runs the block under a deadline; overdue, it raises DeadlineExceeded."""
        return _Deadline(self, seconds)

    @contextlib.contextmanager
    def watching(self, conn: Any) -> Iterator[Any]:
        """Attach `conn` to the current call for the block; detached before it is closed or pooled."""
        self.attach(conn)
        try:
            yield conn
        finally:
            self.detach()

    def attach(self, conn: Any) -> None:
        """The current call now uses `conn`; raises if the call is already overdue."""
        call = _current_call.get()
        if call is None:
            return
        with self._lock:
            if call.expired:
                raise DeadlineExceeded("PostgreSQL call exceeded its deadline before it got a connection")
            call.conn = conn

    def detach(self) -> None:
        call = _current_call.get()
        if call is not None:
            with self._lock:
                call.conn = None

    def _loop(self) -> None:
        while True:
            time.sleep(self.TICK_S)
            now = time.monotonic()
            with self._lock:
                for call in self._calls:
                    if not call.expired and now >= call.deadline:
                        call.expired = True
                        if call.conn is not None:
                            _cut(call.conn)


class _Deadline:
    """The context manager behind `_Watchdog.deadline` (a class: this is on every call's path)."""

    __slots__ = ("watchdog", "seconds", "call", "token")

    def __init__(self, watchdog: _Watchdog, seconds: float):
        self.watchdog, self.seconds = watchdog, seconds

    def __enter__(self) -> _Call:
        wd = self.watchdog
        call = self.call = _Call(time.monotonic() + self.seconds)
        with wd._lock:
            wd._calls.add(call)
            if wd._thread is None:
                wd._ensure_thread()
        self.token = _current_call.set(call)
        return call

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        call = self.call
        _current_call.reset(self.token)
        with self.watchdog._lock:
            self.watchdog._calls.discard(call)
            call.conn = None
        if exc is not None and call.expired and isinstance(exc, Exception) and not isinstance(exc, DeadlineExceeded):
            raise DeadlineExceeded(f"PostgreSQL call exceeded its {self.seconds:.1f} s deadline") from exc
        return False


def _cut(conn: Any) -> None:
    """Shut the connection's socket down (both ways) so a blocked read or write returns now."""
    try:
        fd = conn.pgconn.socket
        sock = socket.socket(fileno=os.dup(fd))
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()
    except (OSError, psycopg.Error) as exc:  # already closed: nothing is blocked on it
        log.debug("could not cut an overdue connection: %s", exc)


class _DeadlinePostgresSaver(PostgresSaver):
    """PostgresSaver on a pool whose every wait is bounded by the current call's deadline.

    Same statements and transactions as `PostgresSaver._cursor` (pool, no shared pipeline); the
    saver's lock and the pool's `getconn` wait at most until the deadline, and the connection is
    watched so the watchdog can cut it if the server stops answering mid-call.
    """

    watchdog: _Watchdog
    shared: Any

    @contextlib.contextmanager
    def _cursor(self, *, pipeline: bool = False) -> Iterator[Any]:
        call = _current_call.get()
        remaining = (lambda: max(0.01, call.deadline - time.monotonic())) if call is not None else (lambda: None)
        if not self.lock.acquire(timeout=remaining() or -1):
            raise DeadlineExceeded("PostgreSQL call exceeded its deadline waiting for the saver's lock")
        try:
            if call is not None and self.shared.degraded:
                # Waited behind a call that found PostgreSQL gone: do not queue on it again.
                raise CheckpointUnavailable("PostgreSQL became unreachable while this call waited")
            with self.conn.connection(timeout=remaining()) as conn:
                self.watchdog.attach(conn)
                try:
                    if pipeline and self.supports_pipeline:
                        with conn.pipeline(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                            yield cur
                    elif pipeline:
                        with conn.transaction(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                            yield cur
                    else:
                        with conn.cursor(binary=True, row_factory=dict_row) as cur:
                            yield cur
                finally:
                    self.watchdog.detach()  # before the connection goes back to the pool
        finally:
            self.lock.release()


class _DeadlineAsyncPostgresSaver(AsyncPostgresSaver):
    """AsyncPostgresSaver whose lock and pool waits are bounded by the current call's deadline and
    whose connection the watchdog can cut (same statements as `AsyncPostgresSaver._cursor`)."""

    watchdog: _Watchdog
    shared: Any

    @contextlib.asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[Any]:
        call = _current_call.get()

        def remaining() -> float | None:
            return max(0.01, call.deadline - time.monotonic()) if call is not None else None

        if self.lock.locked() and call is not None:
            try:
                await asyncio.wait_for(self.lock.acquire(), remaining())
            except asyncio.TimeoutError:
                raise DeadlineExceeded("PostgreSQL call exceeded its deadline waiting for the saver's lock") from None
        else:
            await self.lock.acquire()
        try:
            if call is not None and self.shared.degraded:
                raise CheckpointUnavailable("PostgreSQL became unreachable while this call waited")
            async with self.conn.connection(timeout=remaining()) as conn:
                self.watchdog.attach(conn)
                try:
                    if pipeline and self.supports_pipeline:
                        async with conn.pipeline(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                            yield cur
                    elif pipeline:
                        async with conn.transaction(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                            yield cur
                    else:
                        async with conn.cursor(binary=True, row_factory=dict_row) as cur:
                            yield cur
                finally:
                    self.watchdog.detach()
        finally:
            self.lock.release()


class _Shared:
    """State shared by a saver and its `with_allowlist` clones (one per replica process)."""

    _ids = itertools.count(1)

    def __init__(self, dsn: str, *, replica_id: str | None, call_timeout: float, heartbeat_interval: float,
                 probe_interval: float, pool_size: int, thread_cache_size: int, resync_timeout: float,
                 publish_health: bool):
        self.dsn = dsn
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
        self.started_at = _now()

        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)  # notified on every state change
        self.watchdog = _Watchdog(f"dual-saver-watchdog-{self.replica_id}")
        self.pool: ConnectionPool = make_pool(dsn, max_size=pool_size, name=f"dual-saver-{self.replica_id}")
        # Heartbeats and health rows on a connection of their own: they never queue behind (or grow
        # the pool of) the agents' checkpoint calls.
        self.health_pool: ConnectionPool = make_pool(dsn, max_size=1, name=f"dual-saver-health-{self.replica_id}")
        self.generation = 0  # bumped when a fresh pool replaces a dead one
        self.async_pools: dict[int, tuple[asyncio.AbstractEventLoop, int, AsyncConnectionPool]] = {}

        self.degraded = False
        self.degraded_since: datetime | None = None
        self.reason: str | None = None
        self.memory = InMemorySaver()
        self.ops: list[tuple[str, Any]] = []  # the resync log, in order: rows as PostgresSaver writes them
        self.seeded: set[str] = set()  # threads copied from the read cache into memory this episode
        self.episode_checkpoints = 0
        self.episode_writes = 0
        self.resynced_ops = 0
        self.episode_denials: list[dict[str, Any]] = []
        self.transitions: list[tuple[float, str]] = [(time.monotonic(), "healthy")]
        self.last_success_ts: float | None = None  # time.time() of the last call that reached PostgreSQL
        self.last_resync_ms: float | None = None
        self.last_resync_error: str | None = None

        self.cache_lock = threading.Lock()
        self.cache: OrderedDict[tuple[str, str], CheckpointTuple] = OrderedDict()

        # Kept in memory until written to the health tables.
        self.pending_episodes: list[replica_health.Episode] = []
        self.pending_denials: list[dict[str, Any]] = []
        self.refusal_logs: dict[int, RefusalLog] = {}
        self.episodes_total = 0
        self.denials_total = 0
        self.refusals_total = 0

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


class DualCheckpointSaver(BaseCheckpointSaver[str]):
    """PostgreSQL checkpoints with an in-memory fallback, resync and replica health.

    `dsn` is the agents' database (migrated: checkpoint tables and 003_replica_health). The
    monitor thread starts with the saver; `close()` (or the context manager) stops it.
    """

    def __init__(self, dsn: str, *, serde: SerializerProtocol | None = None, replica_id: str | None = None,
                 call_timeout: float = CALL_TIMEOUT_S, heartbeat_interval: float = HEARTBEAT_INTERVAL_S,
                 probe_interval: float = PROBE_INTERVAL_S, pool_size: int = POOL_SIZE,
                 thread_cache_size: int = THREAD_CACHE_SIZE, resync_timeout: float = RESYNC_TIMEOUT_S,
                 publish_health: bool = True, start: bool = True):
        # Not BaseCheckpointSaver.__init__: `serde` is a property that also re-targets the inner savers.
        self._shared = _Shared(dsn, replica_id=replica_id, call_timeout=call_timeout,
                               heartbeat_interval=heartbeat_interval, probe_interval=probe_interval,
                               pool_size=pool_size, thread_cache_size=thread_cache_size,
                               resync_timeout=resync_timeout, publish_health=publish_health)
        self.serde = serde if serde is not None else AllowlistSerializer(refusals=RefusalLog())
        self._orphans: set[asyncio.Task] = set()
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
        self._pg_entry: tuple[int, PostgresSaver] | None = None
        self._apg_entries: dict[int, tuple[int, AsyncPostgresSaver]] = {}
        memory = copy.copy(self._shared.memory)  # shares the buffer's dicts
        memory.serde = self._serde
        self._memory = memory
        refusals = getattr(value, "refusals", None)
        if isinstance(refusals, RefusalLog):
            with self._shared.lock:
                self._shared.refusal_logs[id(refusals)] = refusals

    # --- live state (the guard reads it at every tool call) -----------------------------------

    @property
    def degraded(self) -> bool:
        return self._shared.degraded

    @property
    def replica_id(self) -> str:
        return self._shared.replica_id

    def status(self) -> dict[str, Any]:
        sh = self._shared
        with sh.lock:
            return {
                "replica_id": sh.replica_id, "state": "degraded" if sh.degraded else "healthy",
                "degraded_since": sh.degraded_since, "reason": sh.reason,
                "buffered_ops": len(sh.ops), "buffered_checkpoints": sh.episode_checkpoints,
                "buffered_writes": sh.episode_writes, "last_success": _ts(sh.last_success_ts),
                "last_resync_ms": sh.last_resync_ms, "last_resync_error": sh.last_resync_error,
                "episodes_total": sh.episodes_total, "denials_total": sh.denials_total,
                "refusals_total": sh.refusals_total, "generation": sh.generation,
            }

    def transitions(self) -> list[tuple[float, str]]:
        """(time.monotonic(), "healthy"|"degraded") for every state change, oldest first."""
        with self._shared.lock:
            return list(self._shared.transitions)

    def wait_for(self, state: str, timeout: float) -> bool:
        """Block until the saver is "healthy" (buffer resynced) or "degraded"; False on timeout."""
        want = state == "degraded"
        sh = self._shared
        with sh.changed:
            return sh.changed.wait_for(lambda: sh.degraded == want and (want or not sh.ops), timeout)

    def record_denial(self, denial: Any) -> None:
        """Keep a guard denial for the health tables (flushed on recovery)."""
        row = denial.as_row() if hasattr(denial, "as_row") else dict(denial)
        row.setdefault("key", str(uuid.uuid4()))
        sh = self._shared
        with sh.lock:
            sh.denials_total += 1
            if sh.degraded:
                sh.episode_denials.append(row)
            else:
                sh.pending_denials.append(row)

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        sh = self._shared
        if sh.monitor is None or not sh.monitor.is_alive():
            sh.stop.clear()
            sh.monitor = threading.Thread(target=self._monitor, name=f"dual-saver-monitor-{sh.replica_id}",
                                          daemon=True)
            sh.monitor.start()

    def close(self) -> None:
        """Stop the monitor, publish a last heartbeat ("stopped") if reachable, close the pools."""
        sh = self._shared
        sh.stop.set()
        sh.wake.set()
        if sh.monitor is not None:
            sh.monitor.join(timeout=sh.call_timeout + 2)
        if not sh.degraded and sh.publish_health:
            try:
                self._flush_health(state="stopped")
            except Exception as exc:  # closing must not fail because PostgreSQL is gone
                log.info("last heartbeat not written: %s", _describe(exc))
        sh.pool.close(timeout=1)
        sh.health_pool.close(timeout=1)
        with sh.lock:
            pools = list(sh.async_pools.values())
            sh.async_pools.clear()
        for loop, _, pool in pools:
            if not loop.is_closed() and loop.is_running():
                asyncio.run_coroutine_threadsafe(pool.close(timeout=0), loop)

    async def aclose_loop(self) -> None:
        """Close this event loop's async pool (call before the loop ends, e.g. in `asyncio.run`).

        The pool's tasks live on the loop; a loop shutting down with an open pool waits for them.
        """
        sh = self._shared
        loop = asyncio.get_running_loop()
        with sh.lock:
            entry = sh.async_pools.pop(id(loop), None)
        if entry is not None:
            await entry[2].close(timeout=1)
        pending = [t for t in self._orphans if t.get_loop() is loop and not t.done()]
        if pending:  # e.g. closing the pool a recovery replaced
            await asyncio.wait(pending, timeout=2)

    async def aclose(self) -> None:
        """`close()` plus closing this event loop's async pool on the loop itself."""
        await self.aclose_loop()
        await asyncio.to_thread(self.close)

    def __enter__(self) -> "DualCheckpointSaver":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def setup(self) -> None:
        """Create or migrate langgraph's checkpoint tables (core.migrate does this for the app)."""
        PostgresSaver(self._shared.pool).setup()

    # --- the wrapped savers -----------------------------------------------------------------

    def _pg(self) -> PostgresSaver:
        sh = self._shared
        entry = self._pg_entry
        if entry is None or entry[0] != sh.generation:
            saver = _DeadlinePostgresSaver(sh.pool, serde=self._serde)
            saver.watchdog, saver.shared = sh.watchdog, sh
            entry = self._pg_entry = (sh.generation, saver)
        return entry[1]

    async def _apg(self) -> AsyncPostgresSaver:
        sh = self._shared
        loop = asyncio.get_running_loop()
        key = id(loop)
        entry = self._apg_entries.get(key)
        if entry is not None and entry[0] == sh.generation:
            return entry[1]
        with sh.lock:
            generation = sh.generation
            pool_entry = sh.async_pools.get(key)
            stale = pool_entry if pool_entry is not None and (pool_entry[1] != generation or pool_entry[0] is not loop) else None
            if pool_entry is None or stale is not None:
                pool = AsyncConnectionPool(
                    conninfo=sh.dsn, min_size=1, max_size=sh.pool_size, timeout=POOL_TIMEOUT_S,
                    name=f"dual-saver-async-{sh.replica_id}", open=False,
                    kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row,
                            "connect_timeout": CONNECT_TIMEOUT_S},
                )
                sh.async_pools[key] = pool_entry = (loop, generation, pool)
                opening = True
            else:
                opening = False
        if stale is not None and stale[0] is loop:
            self._spawn(stale[2].close(timeout=0))
        if opening:
            # Wait for the first connection (bounded): a call queued on a pool still connecting makes
            # it grow, and calls then alternate between backends. A timeout here is a PoolTimeout.
            await pool_entry[2].open(wait=True, timeout=sh.call_timeout)
        saver = _DeadlineAsyncPostgresSaver(pool_entry[2], serde=self._serde)
        saver.watchdog, saver.shared = sh.watchdog, sh
        self._apg_entries[key] = (generation, saver)
        return saver

    def _spawn(self, coro: Any) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._orphans.add(task)
        task.add_done_callback(self._forget)
        return task

    def _forget(self, task: asyncio.Task) -> None:
        self._orphans.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.debug("abandoned PostgreSQL call ended with %s", _describe(task.exception()))

    def _pg_call(self, fn: Callable[[PostgresSaver], Any]) -> Any:
        sh = self._shared
        pg = self._pg()
        with sh.watchdog.deadline(sh.call_timeout):
            result = fn(pg)
        sh.last_success_ts = time.time()
        return result

    async def _apg_call(self, make: Callable[[AsyncPostgresSaver], Any]) -> Any:
        sh = self._shared
        apg = await self._apg()
        with sh.watchdog.deadline(sh.call_timeout):
            result = await make(apg)
        sh.last_success_ts = time.time()
        return result

    # --- failures ---------------------------------------------------------------------------

    def _handle(self, exc: BaseException, config: RunnableConfig | None) -> None:
        """Degrade on a connection failure; re-raise anything else."""
        if isinstance(exc, SerializationRefused):
            if config is not None:
                thread_id, _, checkpoint_id = _thread_of(config)
                exc.refusal.thread_id = exc.refusal.thread_id or thread_id
                exc.refusal.checkpoint_id = exc.refusal.checkpoint_id or checkpoint_id
            raise exc
        if not is_connection_failure(exc):
            raise exc
        self._degrade(_describe(exc))

    def _degrade(self, reason: str) -> None:
        sh = self._shared
        with sh.changed:
            if sh.degraded:
                return
            sh.degraded = True
            sh.degraded_since = _now()
            sh.reason = reason
            sh.episode_checkpoints = sh.episode_writes = sh.resynced_ops = 0
            sh.episode_denials = []
            sh.seeded = set()
            sh.transitions.append((time.monotonic(), "degraded"))
            sh.changed.notify_all()
        sh.wake.set()
        log.warning("checkpoint persistence DEGRADED (replica %s): %s", sh.replica_id, reason)

    # --- read cache (what PostgreSQL had, for degraded reads) ------------------------------

    def _remember(self, tup: CheckpointTuple | None) -> None:
        if tup is None:
            return
        sh = self._shared
        conf = tup.config["configurable"]
        key = (str(conf["thread_id"]), conf.get("checkpoint_ns", ""))
        current = sh.cache.get(key)
        if current is not None and current.config["configurable"]["checkpoint_id"] == conf["checkpoint_id"]:
            return  # already known (a plain dict read: no lock needed on this hot path)
        with sh.cache_lock:
            current = sh.cache.get(key)
            if current is not None and current.config["configurable"]["checkpoint_id"] > tup.config["configurable"]["checkpoint_id"]:
                return
            sh.cache[key] = tup
            sh.cache.move_to_end(key)
            while len(sh.cache) > sh.thread_cache_size:
                sh.cache.popitem(last=False)

    def _remember_put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                      next_config: RunnableConfig) -> None:
        thread_id, ns, parent_id = _thread_of(config)
        parent = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent_id}} if parent_id else None
        snapshot = {**checkpoint, "channel_values": dict(checkpoint["channel_values"]),
                    "channel_versions": dict(checkpoint["channel_versions"])}
        self._remember(CheckpointTuple(next_config, snapshot, get_serializable_checkpoint_metadata(config, metadata),
                                       parent, []))

    def _remember_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str) -> None:
        sh = self._shared
        thread_id, ns, checkpoint_id = _thread_of(config)
        with sh.cache_lock:
            current = sh.cache.get((thread_id, ns))
            if current is not None and current.config["configurable"]["checkpoint_id"] == checkpoint_id:
                # A new list: the cached tuple may be the very object a caller got from get_tuple.
                sh.cache[(thread_id, ns)] = current._replace(pending_writes=[
                    *(current.pending_writes or []), *((task_id, channel, value) for channel, value in writes)])

    def _seed(self, thread_id: str | None) -> None:
        """Copy what PostgreSQL had for a thread (or every cached thread) into the memory buffer.

        Called under the shared lock, only while degraded. Not logged for resync: it is in PostgreSQL.
        """
        sh = self._shared
        with sh.cache_lock:
            tuples = [t for (tid, _), t in sh.cache.items() if (thread_id is None or tid == thread_id)
                      and tid not in sh.seeded]
        for tup in tuples:
            tid, ns, checkpoint_id = _thread_of(tup.config)
            if sh.memory.storage.get(tid, {}).get(ns, {}).get(checkpoint_id) is None:
                parent = tup.parent_config or {"configurable": {"thread_id": tid, "checkpoint_ns": ns}}
                self._memory.put(parent, tup.checkpoint, tup.metadata, tup.checkpoint["channel_versions"])
                by_task: dict[str, list[tuple[str, Any]]] = {}
                for task_id, channel, value in tup.pending_writes or []:
                    by_task.setdefault(task_id, []).append((channel, value))
                for task_id, writes in by_task.items():
                    self._memory.put_writes(tup.config, writes, task_id)
        if thread_id is None:
            sh.seeded.update(tid for (tid, _) in list(sh.cache))
        else:
            sh.seeded.add(thread_id)

    # --- degraded paths (memory buffer + resync log) ----------------------------------------

    def _degraded_get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        sh = self._shared
        thread_id, _, checkpoint_id = _thread_of(config)
        with sh.lock:
            if not sh.degraded:
                return None  # recovered meanwhile: caller retries PostgreSQL
            self._seed(thread_id)
            found = self._memory.get_tuple(config)
        if found is None and checkpoint_id:
            raise CheckpointUnavailable(
                f"checkpoint {checkpoint_id} of thread {thread_id} is not in this replica's buffer and "
                f"PostgreSQL is unreachable")
        return found

    def _degraded_list(self, config: RunnableConfig | None, **kwargs: Any) -> list[CheckpointTuple] | None:
        sh = self._shared
        with sh.lock:
            if not sh.degraded:
                return None
            self._seed(str(config["configurable"]["thread_id"]) if config and config["configurable"].get("thread_id") is not None else None)
            return list(self._memory.list(config, **kwargs))

    def _buffer(self, kind: str, config: RunnableConfig | None, apply: Callable[[], Any], rows: Any) -> tuple[bool, Any]:
        """Apply to memory and append to the resync log, atomically; (False, None) if no longer degraded."""
        sh = self._shared
        with sh.lock:
            if not sh.degraded:
                return False, None
            if config is not None:
                self._seed(_thread_of(config)[0])
            result = apply()
            sh.ops.append((kind, rows))
            if kind == "put":
                sh.episode_checkpoints += 1
            elif kind == "put_writes":
                sh.episode_writes += 1
            return True, result

    def _put_rows(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                  new_versions: ChannelVersions) -> tuple[list[tuple], tuple]:
        """The blob rows and the checkpoint row `PostgresSaver.put` would write, serialized now.

        Same split as PostgresSaver.put: primitives stay inline in the checkpoint JSON, the rest
        (and delta snapshots) go to checkpoint_blobs. The JSON is copied now, since the run goes on
        mutating its dicts after the call.
        """
        pg = self._pg()
        conf = config["configurable"]
        thread_id, ns, parent_id = conf["thread_id"], conf["checkpoint_ns"], conf.get("checkpoint_id")
        inline = {**checkpoint, "channel_values": dict(checkpoint["channel_values"])}
        blob_values: dict[str, Any] = {}
        for k, v in checkpoint["channel_values"].items():
            if isinstance(v, _DeltaSnapshot):
                blob_values[k] = inline["channel_values"].pop(k)
                inline["channel_values"][k] = True
            elif v is None or isinstance(v, (str, int, float, bool)):
                pass
            else:
                blob_values[k] = inline["channel_values"].pop(k)
        blob_versions = {k: v for k, v in new_versions.items() if k in blob_values}
        blobs = pg._dump_blobs(thread_id, ns, blob_values, blob_versions) if blob_versions else []
        row = (thread_id, ns, checkpoint["id"], parent_id, json.loads(json.dumps(inline)),
               json.loads(json.dumps(get_serializable_checkpoint_metadata(config, metadata))))
        return blobs, row

    def _buffer_put(self, config, checkpoint, metadata, new_versions) -> tuple[bool, Any]:
        rows = self._put_rows(config, checkpoint, metadata, new_versions)
        conf = config["configurable"]
        next_config = {"configurable": {"thread_id": conf["thread_id"], "checkpoint_ns": conf["checkpoint_ns"],
                                        "checkpoint_id": checkpoint["id"]}}

        def apply() -> RunnableConfig:
            self._memory.put(config, checkpoint, metadata, new_versions)
            return next_config

        return self._buffer("put", config, apply, rows)

    def _buffer_writes(self, config, writes, task_id, task_path) -> tuple[bool, Any]:
        conf = config["configurable"]
        upsert = all(w[0] in WRITES_IDX_MAP for w in writes)
        rows = (upsert, self._pg()._dump_writes(conf["thread_id"], conf["checkpoint_ns"], conf["checkpoint_id"],
                                                task_id, task_path, writes))
        return self._buffer("put_writes", config,
                            lambda: self._memory.put_writes(config, writes, task_id, task_path), rows)

    def _buffer_delete(self, thread_id: str) -> tuple[bool, Any]:
        sh = self._shared

        def apply() -> None:
            self._memory.delete_thread(thread_id)
            with sh.cache_lock:
                for key in [k for k in sh.cache if k[0] == str(thread_id)]:
                    del sh.cache[key]
            sh.seeded.add(str(thread_id))

        return self._buffer("delete_thread", None, apply, str(thread_id))

    # --- sync API ---------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if not self._shared.degraded:  # the common case, kept short
            try:
                found = self._pg_call(lambda pg: pg.get_tuple(config))
            except Exception as exc:
                self._handle(exc, config)
            else:
                if found is not None and not config["configurable"].get("checkpoint_id"):
                    self._remember(found)
                return found
        for _ in range(3):
            if not self._shared.degraded:
                try:
                    found = self._pg_call(lambda pg: pg.get_tuple(config))
                except Exception as exc:
                    self._handle(exc, config)
                else:
                    if not get_checkpoint_id(config):
                        self._remember(found)
                    return found
            if self._shared.degraded:
                found = self._degraded_get_tuple(config)
                if self._shared.degraded or found is not None:
                    return found
        raise CheckpointUnavailable("checkpoint persistence flapping: read not served")

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        kwargs = {"filter": filter, "before": before, "limit": limit}
        for _ in range(3):
            if not self._shared.degraded:
                try:
                    found = self._pg_call(lambda pg: list(pg.list(config, **kwargs)))
                except Exception as exc:
                    self._handle(exc, config)
                else:
                    yield from found
                    return
            buffered = self._degraded_list(config, **kwargs)
            if buffered is not None:
                yield from buffered
                return
        raise CheckpointUnavailable("checkpoint persistence flapping: list not served")

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        for _ in range(3):
            if not self._shared.degraded:
                try:
                    next_config = self._pg_call(lambda pg: pg.put(config, checkpoint, metadata, new_versions))
                except Exception as exc:
                    self._handle(exc, config)
                else:
                    self._remember_put(config, checkpoint, metadata, next_config)
                    return next_config
            done, next_config = self._buffer_put(config, checkpoint, metadata, new_versions)
            if done:
                return next_config
        raise CheckpointUnavailable("checkpoint persistence flapping: put not stored")

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        for _ in range(3):
            if not self._shared.degraded:
                try:
                    self._pg_call(lambda pg: pg.put_writes(config, writes, task_id, task_path))
                except Exception as exc:
                    self._handle(exc, config)
                else:
                    self._remember_writes(config, writes, task_id)
                    return
            done, _ = self._buffer_writes(config, writes, task_id, task_path)
            if done:
                return
        raise CheckpointUnavailable("checkpoint persistence flapping: writes not stored")

    def delete_thread(self, thread_id: str) -> None:
        for _ in range(3):
            if not self._shared.degraded:
                try:
                    self._pg_call(lambda pg: pg.delete_thread(thread_id))
                except Exception as exc:
                    self._handle(exc, None)
                else:
                    self._forget_thread(thread_id)
                    return
            done, _ = self._buffer_delete(thread_id)
            if done:
                return
        raise CheckpointUnavailable("checkpoint persistence flapping: delete not applied")

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune in PostgreSQL. Refused (CheckpointUnavailable) while degraded: nothing is deleted."""
        if self._shared.degraded:
            raise CheckpointUnavailable("prune needs PostgreSQL, which is unreachable; retry when healthy")
        try:
            self._pg_call(lambda pg: pg.prune(thread_ids, strategy=strategy))
        except Exception as exc:
            self._handle(exc, None)
            raise CheckpointUnavailable("prune needs PostgreSQL, which became unreachable; retry when healthy") from exc
        for thread_id in thread_ids:
            self._forget_thread(thread_id)

    def _forget_thread(self, thread_id: str) -> None:
        sh = self._shared
        with sh.cache_lock:
            for key in [k for k in sh.cache if k[0] == str(thread_id)]:
                del sh.cache[key]

    def get_next_version(self, current: str | None, channel: None) -> str:
        return BasePostgresSaver.get_next_version(self, current, channel)  # type: ignore[arg-type]

    # --- async API (native: AsyncPostgresSaver on this loop's async pool) -----------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        for _ in range(3):
            if not self._shared.degraded:
                try:
                    found = await self._apg_call(lambda apg: apg.aget_tuple(config))
                except Exception as exc:
                    self._handle(exc, config)
                else:
                    if not get_checkpoint_id(config):
                        self._remember(found)
                    return found
            if self._shared.degraded:
                found = self._degraded_get_tuple(config)
                if self._shared.degraded or found is not None:
                    return found
        raise CheckpointUnavailable("checkpoint persistence flapping: read not served")

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        kwargs = {"filter": filter, "before": before, "limit": limit}

        async def collect(apg: AsyncPostgresSaver) -> list[CheckpointTuple]:
            return [t async for t in apg.alist(config, **kwargs)]

        for _ in range(3):
            if not self._shared.degraded:
                try:
                    found = await self._apg_call(collect)
                except Exception as exc:
                    self._handle(exc, config)
                else:
                    for tup in found:
                        yield tup
                    return
            buffered = self._degraded_list(config, **kwargs)
            if buffered is not None:
                for tup in buffered:
                    yield tup
                return
        raise CheckpointUnavailable("checkpoint persistence flapping: list not served")

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        for _ in range(3):
            if not self._shared.degraded:
                try:
                    next_config = await self._apg_call(lambda apg: apg.aput(config, checkpoint, metadata, new_versions))
                except Exception as exc:
                    self._handle(exc, config)
                else:
                    self._remember_put(config, checkpoint, metadata, next_config)
                    return next_config
            done, next_config = self._buffer_put(config, checkpoint, metadata, new_versions)
            if done:
                return next_config
        raise CheckpointUnavailable("checkpoint persistence flapping: put not stored")

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        for _ in range(3):
            if not self._shared.degraded:
                try:
                    await self._apg_call(lambda apg: apg.aput_writes(config, writes, task_id, task_path))
                except Exception as exc:
                    self._handle(exc, config)
                else:
                    self._remember_writes(config, writes, task_id)
                    return
            done, _ = self._buffer_writes(config, writes, task_id, task_path)
            if done:
                return
        raise CheckpointUnavailable("checkpoint persistence flapping: writes not stored")

    async def adelete_thread(self, thread_id: str) -> None:
        for _ in range(3):
            if not self._shared.degraded:
                try:
                    await self._apg_call(lambda apg: apg.adelete_thread(thread_id))
                except Exception as exc:
                    self._handle(exc, None)
                else:
                    self._forget_thread(thread_id)
                    return
            done, _ = self._buffer_delete(thread_id)
            if done:
                return
        raise CheckpointUnavailable("checkpoint persistence flapping: delete not applied")

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune in PostgreSQL. Refused (CheckpointUnavailable) while degraded: nothing is deleted."""
        if self._shared.degraded:
            raise CheckpointUnavailable("prune needs PostgreSQL, which is unreachable; retry when healthy")
        try:
            await self._apg_call(lambda apg: apg.aprune(thread_ids, strategy=strategy))
        except Exception as exc:
            self._handle(exc, None)
            raise CheckpointUnavailable("prune needs PostgreSQL, which became unreachable; retry when healthy") from exc
        for thread_id in thread_ids:
            self._forget_thread(thread_id)

    # --- monitor: heartbeat while healthy, probe + resync while degraded ---------------------

    def _monitor(self) -> None:
        sh = self._shared
        while not sh.stop.is_set():
            try:
                if sh.degraded:
                    if not self._try_recover():
                        sh.stop.wait(sh.probe_interval)
                    continue
                if sh.publish_health:
                    self._flush_health()
            except Exception as exc:
                if is_connection_failure(exc):
                    self._degrade(_describe(exc))
                    continue
                # E.g. the health tables are missing (migration 003 not applied): say it once, not every beat.
                message = _describe(exc)
                if message != getattr(self, "_last_monitor_error", None):
                    self._last_monitor_error = message
                    log.exception("dual saver monitor error (repeats are not logged)")
            sh.wake.wait(sh.heartbeat_interval)
            sh.wake.clear()

    def _try_recover(self) -> bool:
        sh = self._shared
        try:
            with sh.watchdog.deadline(PROBE_CONNECT_TIMEOUT_S + sh.call_timeout), \
                    psycopg.connect(sh.dsn, connect_timeout=PROBE_CONNECT_TIMEOUT_S, autocommit=True) as conn, \
                    sh.watchdog.watching(conn):
                conn.execute("SELECT 1")
        except (psycopg.Error, DeadlineExceeded):
            return False
        started = time.monotonic()
        with sh.lock:
            degraded_since = sh.degraded_since
        if sh.publish_health:
            try:  # tell the SRE page we are back and resyncing, with what we hold
                self._publish_heartbeat(state="degraded")
            except Exception as exc:
                log.info("heartbeat before resync not written: %s", _describe(exc))
        # Replay without the lock while agents keep buffering; committed ops leave the log.
        for _ in range(3):
            with sh.lock:
                batch = list(sh.ops)
            if len(batch) <= 50:
                break
            try:
                self._replay(batch)
            except Exception as exc:
                sh.last_resync_error = _describe(exc)
                log.warning("resync of %d buffered operations failed (kept): %s", len(batch), sh.last_resync_error)
                return False
            with sh.lock:
                del sh.ops[:len(batch)]
                sh.resynced_ops += len(batch)
        fresh = make_pool(sh.dsn, max_size=sh.pool_size, name=f"dual-saver-{sh.replica_id}")
        with sh.changed:
            try:  # the tail, under the lock so that nothing slips in between the replay and the switch
                self._replay(sh.ops)
            except Exception as exc:
                sh.last_resync_error = _describe(exc)
                log.warning("resync of %d buffered operations failed (kept): %s", len(sh.ops), sh.last_resync_error)
                fresh.close(timeout=0)
                return False
            sh.resynced_ops += len(sh.ops)
            old, old_health = sh.pool, sh.health_pool
            sh.pool = fresh
            sh.health_pool = make_pool(sh.dsn, max_size=1, name=f"dual-saver-health-{sh.replica_id}")
            sh.generation += 1
            resynced, sh.resynced_ops = sh.resynced_ops, 0
            sh.ops.clear()
            sh.memory.storage.clear()
            sh.memory.writes.clear()
            sh.memory.blobs.clear()
            sh.seeded = set()
            sh.degraded = False
            sh.last_success_ts = time.time()
            sh.last_resync_ms = (time.monotonic() - started) * 1000
            sh.last_resync_error = None
            sh.episodes_total += 1
            sh.pending_episodes.append(replica_health.Episode(
                replica_id=sh.replica_id, host=sh.host, pid=sh.pid, degraded_from=degraded_since or _now(),
                degraded_to=_now(), reason=sh.reason, checkpoints_buffered=sh.episode_checkpoints,
                writes_buffered=sh.episode_writes, ops_resynced=resynced, resync_ms=sh.last_resync_ms,
                denials=list(sh.episode_denials),
            ))
            sh.episode_denials = []
            sh.degraded_since = None
            sh.transitions.append((time.monotonic(), "healthy"))
            sh.changed.notify_all()
        for stale in (old, old_health):
            threading.Thread(target=stale.close, kwargs={"timeout": 2}, daemon=True).start()
        log.warning("checkpoint persistence RECOVERED (replica %s): %d operations resynced in %.0f ms",
                    sh.replica_id, resynced, sh.last_resync_ms)
        if sh.publish_health:
            try:
                self._flush_health()
            except Exception as exc:
                log.info("health flush after recovery failed (kept for the next heartbeat): %s", _describe(exc))
        return True

    def _replay(self, ops: list[tuple[str, Any]]) -> None:
        """Write buffered operations in one transaction with PostgresSaver's own upsert statements.

        Consecutive puts/writes are sent as batches; a thread deletion flushes what came before it,
        so the result is that of the operations applied one by one, in order. Re-running it
        (after a failed commit, or over rows an abandoned call wrote meanwhile) changes nothing.
        """
        if not ops:
            return
        sh = self._shared
        sql = BasePostgresSaver

        def run() -> None:
            with psycopg.connect(sh.dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row,
                                 connect_timeout=CONNECT_TIMEOUT_S) as conn, sh.watchdog.watching(conn), \
                    conn.transaction():
                with conn.cursor() as cur:
                    blobs: list[tuple] = []
                    checkpoints: list[tuple] = []
                    upserts: list[tuple] = []
                    inserts: list[tuple] = []

                    def flush() -> None:
                        for statement, rows in ((sql.UPSERT_CHECKPOINT_BLOBS_SQL, blobs),
                                                (sql.UPSERT_CHECKPOINTS_SQL, checkpoints),
                                                (sql.UPSERT_CHECKPOINT_WRITES_SQL, upserts),
                                                (sql.INSERT_CHECKPOINT_WRITES_SQL, inserts)):
                            if rows:
                                cur.executemany(statement, rows)
                                rows.clear()

                    for kind, payload in ops:
                        if kind == "put":
                            blob_rows, (thread_id, ns, checkpoint_id, parent_id, inline, metadata) = payload
                            blobs.extend(blob_rows)
                            checkpoints.append((thread_id, ns, checkpoint_id, parent_id, Jsonb(inline), Jsonb(metadata)))
                        elif kind == "put_writes":
                            upsert, rows = payload
                            (upserts if upsert else inserts).extend(rows)
                        elif kind == "delete_thread":
                            flush()
                            for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
                                cur.execute(f"DELETE FROM {table} WHERE thread_id = %s", (payload,))
                        else:  # pragma: no cover - the log only holds the kinds above
                            raise ValueError(f"unknown buffered operation {kind!r}")
                    flush()

        with sh.watchdog.deadline(sh.resync_timeout):
            run()

    # --- health publishing --------------------------------------------------------------------

    def _heartbeat_row(self, state: str) -> dict[str, Any]:
        sh = self._shared
        with sh.lock:
            return {
                "replica_id": sh.replica_id, "host": sh.host, "pid": sh.pid, "state": state,
                "degraded_since": sh.degraded_since, "buffered_checkpoints": sh.episode_checkpoints if sh.degraded else 0,
                "buffered_writes": sh.episode_writes if sh.degraded else 0, "last_success": _ts(sh.last_success_ts),
                "started_at": sh.started_at, "heartbeat_interval_s": sh.heartbeat_interval,
                "episodes_total": sh.episodes_total, "denials_total": sh.denials_total,
                "refusals_total": sh.refusals_total,
            }

    def _with_health_conn(self, fn: Callable[[psycopg.Connection], Any]) -> Any:
        sh = self._shared

        with sh.watchdog.deadline(sh.call_timeout), sh.health_pool.connection(timeout=sh.call_timeout) as conn, \
                sh.watchdog.watching(conn):
            result = fn(conn)
        sh.last_success_ts = time.time()
        return result

    def _publish_heartbeat(self, state: str) -> None:
        sh = self._shared
        row = self._heartbeat_row(state)

        with sh.watchdog.deadline(sh.call_timeout), \
                psycopg.connect(sh.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn, \
                sh.watchdog.watching(conn):
            replica_health.publish_heartbeat(conn, row)

    def _flush_health(self, state: str | None = None) -> None:
        """Write pending episodes, denials and refusals, then the heartbeat. Keeps what fails."""
        sh = self._shared
        with sh.lock:
            episodes, sh.pending_episodes = sh.pending_episodes, []
            denials, sh.pending_denials = sh.pending_denials, []
            logs = list(sh.refusal_logs.values())
        refusals = [(refusal_log, refusal_log.drain()) for refusal_log in logs]
        try:
            while episodes:
                self._with_health_conn(lambda conn: replica_health.write_episode(conn, episodes[0]))
                episodes.pop(0)
            if denials:
                self._with_health_conn(lambda conn: replica_health.write_denials(conn, sh.replica_id, denials))
                denials = []
            while refusals:
                refusal_log, items = refusals[0]
                if items:
                    self._with_health_conn(lambda conn: replica_health.write_refusals(conn, sh.replica_id, items))
                    with sh.lock:
                        sh.refusals_total += len(items)
                refusals.pop(0)
        finally:
            if episodes or denials or refusals:  # not written: back in memory for the next flush
                with sh.lock:
                    sh.pending_episodes[:0] = episodes
                    sh.pending_denials[:0] = denials
                for refusal_log, items in refusals:
                    refusal_log.restore(items)
        row = self._heartbeat_row(state or ("degraded" if sh.degraded else "healthy"))
        self._with_health_conn(lambda conn: replica_health.publish_heartbeat(conn, row))
