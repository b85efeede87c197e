"""The time our own logs record. Real time, except while the demo replays past days.

Only our tables (memory-write log, conversations) use it; the store and the
checkpointer always use the database's clock.
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Iterator

_simulated: contextvars.ContextVar[datetime | None] = contextvars.ContextVar("simulated_now", default=None)


def now() -> datetime:
    return _simulated.get() or datetime.now(timezone.utc)


def simulated_now() -> datetime | None:
    """The replayed time inside `simulated`, else None."""
    return _simulated.get()


@contextmanager
def simulated(at: datetime) -> Iterator[None]:
    """Within the block (this thread or task), `now()` returns `at`."""
    token = _simulated.set(at)
    try:
        yield
    finally:
        _simulated.reset(token)
