"""Deadlines for PostgreSQL calls: the watchdog that cuts an overdue call's socket, and the
sync/async PostgresSaver twins whose lock and pool waits end at the current call's deadline."""
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row

from core.checkpoints.failures import CheckpointUnavailable, DeadlineExceeded

log = logging.getLogger("core.checkpoints.dual_saver")

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
    connection is then broken and the pool discards it. A daemon thread, checking every 50 ms; it
    exits after IDLE_EXIT_S without calls and on `stop()`, and the next call starts it again.
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
                    if not call.expired and now >= call.deadline:
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
