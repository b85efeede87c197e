"""The demo seed in the background: its progress, readable from other threads (the dashboard's
sidebar), and the one thread per process and database that runs it.

Light on purpose: importing the agents (core.demo.seed) takes seconds, so the dashboard's first
page does not wait for it; the seed's thread imports them.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class SeedProgress:
    """Where this process's demo seed is, for the dashboard's sidebar (read from other threads).

    state: idle (not started) | waiting (another process holds the seed lock) | seeding | done
    (seeded here) | skipped (the database already had data) | failed."""
    state: str = "idle"
    step: str = ""
    done: int = 0
    total: int = 0
    error: str | None = None
    summary: Any = None  # core.demo.seed.DemoSummary once done
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def running(self) -> bool:
        return self.state in ("waiting", "seeding")

    @property
    def finished(self) -> bool:
        return self.state in ("done", "skipped", "failed")

    started: bool = False  # the seed's thread was started
    counted: dict = field(default_factory=dict)  # step -> its final count, once the next step began

    def at(self, step: str, done: int = 0, total: int = 0) -> None:
        if self.step:
            self.counted[self.step] = self.done
        self.step, self.done, self.total = step, done, total


# The steps of `seed`, in order (the sidebar names them).
SEED_STEPS = ("suppliers", "employees", "customers", "legacy", "operations", "outage")


_background: dict[str, SeedProgress] = {}
_background_lock = threading.Lock()


def background_seed(dsn: str) -> SeedProgress:
    """The progress of this process's background seed of `dsn` (state idle until it starts)."""
    with _background_lock:
        return _background.setdefault(dsn, SeedProgress())


def start_background_seed(db: Any, settings: Any, *, replicas: int = 0, **kwargs) -> SeedProgress:
    """Seed (ensure_demo) in a daemon thread, once per process and database, then start `replicas`
    live replicas. Returns the progress the thread updates (the same object on every call)."""
    with _background_lock:
        progress = _background.setdefault(db.dsn, SeedProgress())
        if progress.started:
            return progress
        progress.started = True

    def run() -> None:
        from core.demo.seed import ensure_demo, start_replicas  # the agents' imports take seconds

        try:
            ensure_demo(db, settings, progress=progress, **kwargs)
        except Exception as exc:  # noqa: BLE001 - shown in the sidebar; the pages keep working
            log.exception("demo seed failed")
            progress.error = str(exc).strip() or type(exc).__name__
            progress.state = "failed"
            progress.finished_at = time.time()
        if replicas:
            start_replicas(db, settings, replicas)

    threading.Thread(target=run, name="demo-seed", daemon=True).start()
    return progress


