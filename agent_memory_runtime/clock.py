"""The time our own records carry. Real time, except while the demo replays past days.

`simulated(at)` replays a moment: inside the block (this thread or task) `now()` is `at`, standing
still (a conversation turn), or, with `running=True`, starting at `at` and running at real speed
(a job: a sweep or an erasure keeps its real duration). Our SQL stamps `now() + shift()`, which is
plain `now()` outside the block. `ManualClock` is a clock object for code that runs in threads of its
own (the dual saver's degradation episodes): the demo sets and moves it.

The store and LangGraph's checkpoints always carry the database's real clock.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

# (replayed time, time.time() when it started running, or None when it stands still)
_simulated: contextvars.ContextVar[tuple[datetime, float | None] | None] = contextvars.ContextVar(
    "simulated_now", default=None
)


def real_now() -> datetime:
    return datetime.now(UTC)


def now() -> datetime:
    replay = _simulated.get()
    if replay is None:
        return real_now()
    at, since = replay
    return at if since is None else at + timedelta(seconds=time.time() - since)


def simulated_now() -> datetime | None:
    """The replayed time inside `simulated`, else None."""
    return None if _simulated.get() is None else now()


def shift() -> timedelta:
    """How far `now()` is from real time: zero outside `simulated`. SQL stamps `now() + shift()`."""
    return timedelta(0) if _simulated.get() is None else now() - real_now()


@contextmanager
def simulated(at: datetime, *, running: bool = False) -> Iterator[None]:
    """Within the block (this thread or task), `now()` is `at` (and runs on from it if `running`)."""
    token = _simulated.set((at, time.time() if running else None))
    try:
        yield
    finally:
        _simulated.reset(token)


class ManualClock:
    """A clock that stands still until the demo moves it (`set`, `advance`); call it for the time."""

    def __init__(self, at: datetime):
        self.at = at

    def __call__(self) -> datetime:
        return self.at

    def set(self, at: datetime) -> None:
        self.at = at

    def advance(self, delta: timedelta) -> None:
        self.at += delta
