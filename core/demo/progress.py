"""The demo seed in the background: the one thread per process and database that runs it, and its
progress (`core.demo.seed_progress.SeedProgress`), readable from other threads (the dashboard's sidebar).

Light on purpose: importing the agents (core.demo.seed) takes seconds, so the dashboard's first
page does not wait for it; the seed's thread imports them. The seed never imports this module.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from core.demo.seed_progress import SeedProgress

log = logging.getLogger(__name__)


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
        progress.started_at = time.time()  # the seed's time counts from here: the agents' imports below included

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
