"""One reading shared by every session of the process (issue 29): a health probe that each of 50 open pages
would otherwise run on its own every few seconds is read at most once per interval, and every session shows
that one reading with its time.

Never a stale "ok": a session is given the shared reading only while it is younger than its interval. When it is
older and a new one cannot be had (the read raised, or another session's read has not answered within `wait_s`,
e.g. a hung server), the result is *unknown*, with why, never the previous value.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Shared(Generic[T]):
    value: T | None  # None: unknown (see error)
    at: float  # wall clock (time.time()) of the reading, or of the failed attempt
    error: str | None = None

    @property
    def unknown(self) -> bool:
        return self.value is None


class SharedReading(Generic[T]):
    """`read()` at most once per `interval` seconds for every caller of `get()`; concurrent callers wait up to
    `wait_s` for the one read in progress. A failed read is shared (as unknown) for its interval too, so a
    dead server is not asked once per session."""

    def __init__(
        self, read: Callable[[], T], interval: float, *, wait_s: float, clock: Callable[[], float] = time.monotonic
    ):
        self._read, self.interval, self.wait_s, self._clock = read, interval, wait_s, clock
        self._lock = threading.Lock()
        self._last: Shared[T] | None = None
        self._last_at = 0.0  # self._clock() when the read of self._last began

    def get(self, *, newer_than: float | None = None) -> Shared[T]:
        """The shared reading; `newer_than` (a wall clock): a reading from before it is read again now (e.g. a
        failed probe that a page's read answered after), whatever its interval says."""
        if not self._lock.acquire(timeout=self.wait_s):
            return Shared(None, time.time(), f"no answer in {self.wait_s:g} s")
        try:
            outdated = newer_than is not None and self._last is not None and self._last.at < newer_than
            if self._last is not None and not outdated and self._clock() - self._last_at < self.interval:
                return self._last
            started = self._clock()  # the reading's age counts from before it was taken
            try:
                self._last = Shared(self._read(), time.time())
            except Exception as exc:  # any failure is shown as unknown, with its text
                self._last = Shared(None, time.time(), str(exc).strip() or type(exc).__name__)
            self._last_at = started
            return self._last
        finally:
            self._lock.release()
