"""Admission control for what is expensive by nature (the erasure preview's residue scan, the access export, the
semantic search): at most `slots` at a time per process, the others waiting in line, first come first served, told
their place as it changes. A caller that stops waiting (its page left or rerun: `on_wait` raises) leaves the line;
a slot is freed when its call ends, which a statement timeout bounds (core.db.Database.with_statement_timeout)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

WAIT_POLL_S = 0.5  # how often a waiting caller is told its place (and may stop waiting)


class Admission:
    def __init__(self, slots: int):
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.slots = slots
        self._cond = threading.Condition()
        self._line: deque[object] = deque()
        self._active = 0

    @property
    def active(self) -> int:
        return self._active

    @property
    def waiting(self) -> int:
        return len(self._line)

    @contextmanager
    def slot(self, on_wait: Callable[[int], None] | None = None) -> Iterator[None]:
        """Hold a slot for the block; until one is free, `on_wait(place)` (1: next) is called every WAIT_POLL_S."""
        ticket = object()
        with self._cond:
            self._line.append(ticket)
        try:
            while True:
                with self._cond:
                    place = self._line.index(ticket) + 1
                    if place == 1 and self._active < self.slots:
                        self._line.popleft()
                        self._active += 1
                        break
                if on_wait is not None:
                    on_wait(place)
                with self._cond:
                    self._cond.wait(WAIT_POLL_S)
        except BaseException:
            with self._cond:
                if ticket in self._line:  # it left the line: the others move up
                    self._line.remove(ticket)
                    self._cond.notify_all()
            raise
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()
