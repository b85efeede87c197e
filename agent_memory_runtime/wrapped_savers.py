"""The two wrapped savers: langgraph's `PostgresSaver` on the dual saver's pool and `AsyncPostgresSaver` on
an `AsyncConnectionPool` of each event loop, both of the kind whose sockets the watchdog can cut
(`agent_memory_runtime.deadlines`).

The pools are shared by a saver and its `with_allowlist` clones; the savers are per serializer
(`with_serde`). A recovery opens fresh pools (`reconnect`): the pool's own reconnect backoff after an
outage takes tens of seconds.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from agent_memory_runtime.deadlines import _DeadlineAsyncPostgresSaver, _DeadlinePostgresSaver, _Watchdog
from agent_memory_runtime.failures import _describe
from agent_memory_runtime.pool import CONNECTION_KWARGS, POOL_TIMEOUT_S, make_pool

log = logging.getLogger("agent_memory_runtime.dual_saver")


class _Pools:
    """The connections of a saver and its clones: the sync pool, one async pool per event loop."""

    def __init__(self, dsn: str, *, pool_size: int, replica_id: str):
        self.lock = threading.Lock()
        self.pool: ConnectionPool[psycopg.Connection[DictRow]] = make_pool(
            dsn, max_size=pool_size, name=f"dual-saver-{replica_id}"
        )
        self.generation = 0  # bumped when a fresh pool replaces a dead one
        self.async_pools: dict[
            int, tuple[asyncio.AbstractEventLoop, int, AsyncConnectionPool[psycopg.AsyncConnection[DictRow]]]
        ] = {}
        self.orphans: set[asyncio.Task] = set()  # closing pools a recovery or a closed loop left
        self.last_success_ts: float | None = None  # time.time() of the last call that reached PostgreSQL


class WrappedSavers:
    """The sync and async PostgresSaver of one serializer, and the calls made through them.

    A call has no deadline of its own: slow is bounded server-side (statement_timeout, lock_timeout),
    and gone is cut by the watchdog when the liveness check finds PostgreSQL gone. A call waiting
    for a saver's lock gives up once `is_degraded()`.
    """

    def __init__(
        self,
        dsn: str,
        *,
        serde: SerializerProtocol,
        replica_id: str,
        pool_size: int,
        call_timeout: float,
        watchdog: _Watchdog,
        is_degraded: Callable[[], bool],
    ):
        self._dsn = dsn
        self._replica_id = replica_id
        self._pool_size = pool_size
        self._call_timeout = call_timeout
        self._watchdog = watchdog
        self._is_degraded = is_degraded
        self._pools = _Pools(dsn, pool_size=pool_size, replica_id=replica_id)
        self._bind(serde)

    def with_serde(self, serde: SerializerProtocol) -> WrappedSavers:
        """Savers of their own for `serde`, on the same pools."""
        clone = copy.copy(self)
        clone._bind(serde)
        return clone

    def _bind(self, serde: SerializerProtocol) -> None:
        self._serde = serde
        self._sync_entry: tuple[int, PostgresSaver] | None = None
        self._async_entries: dict[int, tuple[int, AsyncPostgresSaver]] = {}

    @property
    def last_success_ts(self) -> float | None:
        return self._pools.last_success_ts

    @property
    def generation(self) -> int:
        """How many times a recovery replaced the pools."""
        return self._pools.generation

    # --- the savers -------------------------------------------------------------------------

    def sync(self) -> PostgresSaver:
        pools = self._pools
        entry = self._sync_entry
        if entry is None or entry[0] != pools.generation:
            saver = _DeadlinePostgresSaver(pools.pool, serde=self._serde)
            saver.watchdog, saver.is_degraded = self._watchdog, self._is_degraded
            entry = self._sync_entry = (pools.generation, saver)
        return entry[1]

    async def async_saver(self) -> AsyncPostgresSaver:
        pools = self._pools
        loop = asyncio.get_running_loop()
        key = id(loop)
        entry = self._async_entries.get(key)
        pool_entry = pools.async_pools.get(key)  # a plain dict read: no lock on this hot path
        # The saver is valid only on the pool this loop has now (not one aclose_loop or a recovery
        # closed, nor a dead loop's that had the same id).
        if (
            entry is not None
            and entry[0] == pools.generation
            and pool_entry is not None
            and pool_entry[0] is loop
            and entry[1].conn is pool_entry[2]
        ):
            return entry[1]
        with pools.lock:
            # Entries of closed loops go (their pools cannot be closed any more: nothing runs them).
            for k in [k for k, (lp, _, _) in pools.async_pools.items() if lp.is_closed()]:
                del pools.async_pools[k]
            current = {k: v[2] for k, v in pools.async_pools.items()}
            for k in [k for k, (_, saver) in self._async_entries.items() if current.get(k) is not saver.conn]:
                del self._async_entries[k]
            generation = pools.generation
            pool_entry = pools.async_pools.get(key)
            stale = (
                pool_entry
                if pool_entry is not None and (pool_entry[1] != generation or pool_entry[0] is not loop)
                else None
            )
            if pool_entry is None or stale is not None:
                pool = AsyncConnectionPool(
                    conninfo=self._dsn,
                    connection_class=psycopg.AsyncConnection[DictRow],  # typed dict rows, as row_factory
                    min_size=1,
                    max_size=self._pool_size,
                    timeout=POOL_TIMEOUT_S,
                    name=f"dual-saver-async-{self._replica_id}",
                    open=False,
                    kwargs=dict(CONNECTION_KWARGS),
                )
                pools.async_pools[key] = pool_entry = (loop, generation, pool)
                opening = True
            else:
                opening = False
        if stale is not None and stale[0] is loop:
            self._spawn(stale[2].close(timeout=0))
        if opening:
            # Wait for the first connection (bounded): a call queued on a pool still connecting makes
            # it grow, and calls then alternate between backends. A timeout here is a PoolTimeout.
            await pool_entry[2].open(wait=True, timeout=self._call_timeout)
        saver = _DeadlineAsyncPostgresSaver(pool_entry[2], serde=self._serde)
        saver.watchdog, saver.is_degraded = self._watchdog, self._is_degraded
        self._async_entries[key] = (generation, saver)
        return saver

    # --- calls ------------------------------------------------------------------------------

    def call(self, fn: Callable[[PostgresSaver], Any]) -> Any:
        pg = self.sync()
        with self._watchdog.deadline(None):  # slow is bounded server-side; gone is cut by the liveness check
            result = fn(pg)
        self._pools.last_success_ts = time.time()
        return result

    async def acall(self, make: Callable[[AsyncPostgresSaver], Any]) -> Any:
        apg = await self.async_saver()
        with self._watchdog.deadline(None):
            result = await make(apg)
        self._pools.last_success_ts = time.time()
        return result

    # --- pools ------------------------------------------------------------------------------

    def reconnect(self) -> None:
        """Replace the sync pool by a fresh one (the async ones follow at their loop's next call); the
        old one closes in the background."""
        pools = self._pools
        fresh = make_pool(self._dsn, max_size=self._pool_size, name=f"dual-saver-{self._replica_id}")
        with pools.lock:
            old, pools.pool = pools.pool, fresh
            pools.generation += 1
            pools.last_success_ts = time.time()
        threading.Thread(target=old.close, kwargs={"timeout": 2}, daemon=True).start()

    async def aclose_loop(self) -> None:
        """Close this event loop's async pool (call before the loop ends, e.g. in `asyncio.run`).

        The pool's tasks live on the loop; a loop shutting down with an open pool waits for them.
        """
        pools = self._pools
        loop = asyncio.get_running_loop()
        with pools.lock:
            entry = pools.async_pools.pop(id(loop), None)
            self._async_entries.pop(id(loop), None)
        if entry is not None:
            await entry[2].close(timeout=1)
        pending = [t for t in pools.orphans if t.get_loop() is loop and not t.done()]
        if pending:  # e.g. closing the pool a recovery replaced
            await asyncio.wait(pending, timeout=2)

    def close(self) -> None:
        """Close the sync pool, and every async pool whose loop still runs (on that loop)."""
        pools = self._pools
        pools.pool.close(timeout=1)
        with pools.lock:
            async_pools = list(pools.async_pools.values())
            pools.async_pools.clear()
        for loop, _, pool in async_pools:
            if not loop.is_closed() and loop.is_running():
                asyncio.run_coroutine_threadsafe(pool.close(timeout=0), loop)

    def _spawn(self, coro: Any) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._pools.orphans.add(task)
        task.add_done_callback(self._forget)
        return task

    def _forget(self, task: asyncio.Task) -> None:
        self._pools.orphans.discard(task)
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            log.warning("abandoned PostgreSQL call (past its deadline) ended with %s", _describe(exc))
