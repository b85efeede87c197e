"""The watchdog that cuts the socket of a PostgreSQL call blocked on a hung server, and the
sync/async PostgresSaver twins whose connections it can cut.

Two kinds of calls: the monitor's own (liveness check, probe, resync, the heartbeat once the
liveness check has stopped), each with a deadline; and the agents' checkpoint calls (and the
heartbeat while the liveness check runs), which have none: a slow server is bounded server-side by
statement_timeout / lock_timeout and raises a query error, and they are cut only when the saver
finds PostgreSQL gone (`cut_all`, from the switch to degraded)."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Literal, cast

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from agent_memory_runtime.failures import CheckpointUnavailable, DeadlineExceeded

log = logging.getLogger("agent_memory_runtime.dual_saver")


class _Call:
    """One PostgreSQL call the watchdog can cut; `conn` is the connection it is using right now.
    `deadline` (time.monotonic()) is None for a call cut only by `cut_all`."""

    __slots__ = ("deadline", "conn", "expired", "why")

    def __init__(self, deadline: float | None):
        self.deadline = deadline
        self.conn: Any = None
        self.expired = False
        self.why = ""


# The deadline-bound call running in this thread or task (None outside one).
_current_call: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("dual_saver_call", default=None)


class _Watchdog:
    """Cuts the socket of a call that overstays its deadline, or of every call on `cut_all`.

    The call runs in the caller's own thread or task (no hand-off, so no cost on the hot path);
    the watchdog `shutdown()`s the socket of the connection the call is blocked on, which makes
    psycopg raise at once (a hung server blocks a call whatever the pool timeout or keepalives).
    The connection is then broken and the pool discards it. A daemon thread, checking every
    50 ms; it exits after IDLE_EXIT_S without calls and on `stop()`, and the next call starts it again.
    """

    TICK_S = 0.05
    IDLE_EXIT_S = 5.0  # no call for this long: the thread exits

    def __init__(self, name: str):
        self._lock = threading.Lock()
        self._calls: set[_Call] = set()
        self._name = name
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def deadline(self, seconds: float | None) -> _Deadline:
        """`with watchdog.deadline(s):` runs the block under a deadline; overdue, it raises DeadlineExceeded.
        `None`: no deadline, the block is cut (DeadlineExceeded too) only by `cut_all`."""
        return _Deadline(self, seconds)

    def cut_all(self, why: str) -> int:
        """PostgreSQL is gone: cut every call in flight, and refuse the connection to those not yet
        connected. Returns how many calls were cut."""
        with self._lock:
            calls = [call for call in self._calls if not call.expired]
            for call in calls:
                call.expired, call.why = True, why
                if call.conn is not None:
                    _cut(call.conn)
        return len(calls)

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
                raise DeadlineExceeded(call.why or "PostgreSQL call exceeded its deadline before it got a connection")
            call.conn = conn

    def detach(self) -> None:
        call = _current_call.get()
        if call is not None:
            with self._lock:
                call.conn = None

    def _loop(self) -> None:
        idle_since = time.monotonic()
        while not self._stopping.wait(self.TICK_S):
            now = time.monotonic()
            with self._lock:
                if not self._calls:
                    if now - idle_since >= self.IDLE_EXIT_S:  # the next call starts a new thread
                        self._thread = None
                        return
                    continue
                idle_since = now
                for call in self._calls:
                    if not call.expired and call.deadline is not None and now >= call.deadline:
                        call.expired = True
                        if call.conn is not None:
                            _cut(call.conn)
        with self._lock:
            if self._thread is threading.current_thread():
                self._thread = None

    def stop(self, timeout: float = 2.0) -> None:
        """End the thread (the saver is closing); a later call would start a new one."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            self._stopping.set()
            thread.join(timeout)
            self._stopping.clear()


class _Deadline:
    """The context manager behind `_Watchdog.deadline` (a class: this is on every call's path)."""

    __slots__ = ("watchdog", "seconds", "call", "token")

    def __init__(self, watchdog: _Watchdog, seconds: float | None):
        self.watchdog, self.seconds = watchdog, seconds

    def __enter__(self) -> _Call:
        wd = self.watchdog
        call = self.call = _Call(None if self.seconds is None else time.monotonic() + self.seconds)
        with wd._lock:
            wd._calls.add(call)
            if wd._thread is None:
                wd._ensure_thread()
        self.token = _current_call.set(call)
        return call

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        call = self.call
        _current_call.reset(self.token)
        with self.watchdog._lock:
            self.watchdog._calls.discard(call)
            call.conn = None
        if exc is not None and call.expired and isinstance(exc, Exception) and not isinstance(exc, DeadlineExceeded):
            raise DeadlineExceeded(call.why or f"PostgreSQL call exceeded its {self.seconds:.1f} s deadline") from exc
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


LOCK_POLL_S = 0.05  # a call waiting for the saver's lock looks this often whether PostgreSQL is gone


class _DeadlinePostgresSaver(PostgresSaver):
    """PostgresSaver whose connection the watchdog can cut (same statements and transactions as
    `PostgresSaver._cursor`: pool, no shared pipeline).

    Waiting for the saver's lock (behind a slow call of another thread) is no outage: it waits
    until the lock is free, and stops waiting only when the saver is degraded. The pool wait is
    the pool's timeout (a PoolTimeout there means no connection can be made: gone).
    """

    watchdog: _Watchdog
    is_degraded: Callable[[], bool]

    @contextlib.contextmanager
    def _cursor(self, *, pipeline: bool = False) -> Iterator[Any]:
        call = _current_call.get()
        while not self.lock.acquire(timeout=LOCK_POLL_S):
            if call is not None and self.is_degraded():
                raise CheckpointUnavailable("PostgreSQL became unreachable while this call waited")
        try:
            if call is not None and self.is_degraded():
                # Waited behind a call that found PostgreSQL gone: do not queue on it again.
                raise CheckpointUnavailable("PostgreSQL became unreachable while this call waited")
            with cast(ConnectionPool, self.conn).connection() as conn:  # wrapped_savers gives it a pool
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
    """AsyncPostgresSaver whose connection the watchdog can cut (same statements as
    `AsyncPostgresSaver._cursor`). The lock wait is no outage: the holder either finishes or is
    cut when PostgreSQL is found gone, and the waiter then sees the saver degraded."""

    watchdog: _Watchdog
    is_degraded: Callable[[], bool]

    @contextlib.asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[Any]:
        call = _current_call.get()
        await self.lock.acquire()
        try:
            if call is not None and self.is_degraded():
                raise CheckpointUnavailable("PostgreSQL became unreachable while this call waited")
            async with cast(AsyncConnectionPool, self.conn).connection() as conn:  # a pool, as above
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
