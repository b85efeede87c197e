"""Dual checkpoint saver: PostgreSQL first, an in-memory buffer while PostgreSQL is unreachable.

`DualCheckpointSaver` writes through langgraph's `PostgresSaver` (sync) and `AsyncPostgresSaver`
(async, on an `AsyncConnectionPool` of each event loop). Only "PostgreSQL is gone" degrades it:
connection failures (operational errors of the connection classes, pool timeouts, closed
connections) and a failed liveness check (`SELECT 1` on a connection of its own every 0.5 s, 1 s
deadline: `core.checkpoints.liveness`). "PostgreSQL is slow" does not: every saver connection
carries a server-side statement_timeout and lock_timeout, and a call past them fails with a query
error raised to the caller, like data errors and serializer refusals; waiting for the saver's own
lock counts for nothing. A call on a pooled connection to a *hung* server blocks until the server
resumes whatever the pool timeout or keepalives say, so when the liveness check finds PostgreSQL
gone a watchdog thread shuts down the socket of every call in flight, and psycopg raises at once
(sync calls run in the caller's thread, async ones in their task: no hand-off on the hot path;
cancelling psycopg's call on a hung server would itself wait ~10 s for its cancel request).

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

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
)
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.postgres.base import BasePostgresSaver

from core.checkpoints import metrics
from core.checkpoints.closing import Closing
from core.checkpoints.failures import (  # noqa: F401 - re-exported: imported from here by callers
    CALL_TIMEOUT_S,
    CONNECTION_SQLSTATE_PREFIXES,
    HEARTBEAT_INTERVAL_S,
    LIVENESS_INTERVAL_S,
    LIVENESS_TIMEOUT_S,
    LOCK_TIMEOUT_S,
    POOL_SIZE,
    PROBE_CONNECT_TIMEOUT_S,
    PROBE_INTERVAL_S,
    RESYNC_TIMEOUT_S,
    STATEMENT_TIMEOUT_S,
    THREAD_CACHE_SIZE,
    CheckpointUnavailable,
    DeadlineExceeded,
    is_connection_failure,
)
from core.checkpoints.saver_core import SaverCore, refuse_on_event_loop


class DualCheckpointSaver(Closing, SaverCore):
    """PostgreSQL checkpoints with an in-memory fallback, resync and replica health.

    `dsn` is the agents' database (migrated: checkpoint tables and 003_replica_health). The
    monitor thread starts with the saver; `close()` (or the context manager) stops it. The
    pieces: `SaverCore` (state, lifecycle, wrapped savers), `DegradedBuffer`, `Recovery`,
    `HealthPublisher`, `Liveness` (gone or slow); the watchdog in `core.checkpoints.deadlines`. Here: the checkpointer API,
    sync and async twins routing between PostgreSQL and the buffer.
    """

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

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        refuse_on_event_loop()
        kwargs = {"filter": filter, "before": before, "limit": limit}
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

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
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

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
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

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        kwargs = {"filter": filter, "before": before, "limit": limit}

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

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        for _ in range(3):
            if not self._buffer.degraded:
                try:
                    next_config = await self._postgres.acall(lambda apg: apg.aput(config, checkpoint, metadata, new_versions))
                except Exception as exc:
                    self._handle(exc, config)
                else:
                    self._buffer.remember_put(config, checkpoint, metadata, next_config)
                    return next_config
            done, next_config = self._buffer.put(config, checkpoint, metadata, new_versions)
            if done:
                return next_config
        raise CheckpointUnavailable("checkpoint persistence flapping: put not stored")

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
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
