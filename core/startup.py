"""Opening the agents' database: the embedded server and the migrations, in the foreground (an
external PG_AGENTES) or in a background thread started once per process (the embedded default),
so the dashboard renders its first page while initdb, the server's start and the migrations run.

Light on purpose (no langgraph, no pandas): the dashboard imports this before its first page.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core.config import Settings
from core.db import Database

log = logging.getLogger(__name__)

# Modules the first pages import (seconds of CPU on this machine): imported in the background while
# the embedded server starts, so the page that follows the database's start does not wait for them.
WARM_MODULES = ("pandas", "plotly.express", "core.memory.reads", "langgraph.checkpoint.postgres")


def open_database(settings: Settings, on_step: Callable[[str], None] = lambda step: None) -> Database:
    """Start the embedded server if needed, migrate (AUTO_MIGRATE) or check the schema (embedding dims,
    every migration applied with its file's text: core.migrate.check_schema), start the change follower in the
    background (CAPTURE_FOLLOWER, the embedded default) and the live demo replicas when there is no seed (with a
    seed they start once it is done).
    `on_step` hears "starting" then "migrating". Raises on failure (SchemaMismatch names what differs)."""
    from core.migrate import check_schema, migrate

    on_step("starting")
    db = Database.from_settings(settings)
    on_step("migrating")
    if settings.auto_migrate:
        migrate(db.dsn, settings.embeddings_dims)
        if db.ours is not db:  # what an earlier release (or the agents' history) left of ours moves to our database
            from core.own_database import move, plan

            if plan(db.dsn).tables:
                move(db.dsn, log=log.info)
    else:
        check_schema(db.dsn, settings.embeddings_dims)
    if settings.capture_follower:
        from core.capture.background import start_follower

        start_follower(db.dsn)
    if settings.demo_replicas and not settings.seed_demo:
        from core.demo.seed import start_replicas

        start_replicas(db, settings, settings.demo_replicas)
    return db


@dataclass
class Startup:
    """Where this process's background start of the database is (read from other threads).

    state: starting (the embedded server: initdb, start) | migrating | ready | failed."""

    state: str = "starting"
    db: Database | None = None
    error: BaseException | None = None
    started_at: float = 0.0
    ready_at: float | None = None

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    @property
    def failed(self) -> bool:
        return self.state == "failed"


_startups: dict[Path, Startup] = {}
_lock = threading.Lock()


def start_in_background(settings: Settings, *, retry: bool = False) -> Startup:
    """Open the embedded database (`open_database`) in a daemon thread, once per process and data
    folder; every call returns the same Startup. `retry` starts again after a failure."""
    key = Path(settings.data_dir).resolve()
    with _lock:
        startup = _startups.get(key)
        if startup is not None and not (retry and startup.failed):
            return startup
        startup = _startups[key] = Startup(started_at=time.time())

    def step(state: str) -> None:
        startup.state = state

    def run() -> None:
        try:
            db = open_database(settings, step)
        except Exception as exc:  # noqa: BLE001 - the dashboard shows it, with a retry button
            log.exception("the database did not start")
            startup.error, startup.state = exc, "failed"
            return
        startup.db, startup.ready_at, startup.state = db, time.time(), "ready"

    threading.Thread(target=run, name="database-start", daemon=True).start()
    return startup


_warmed = threading.Event()


def warm_imports(modules: tuple[str, ...] = WARM_MODULES) -> None:
    """Import `modules` in a daemon thread, once per process (errors are left to the real import)."""
    with _lock:
        if _warmed.is_set():
            return
        _warmed.set()

    def run() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the page's own import reports it
                log.debug("warm import of %s failed", name, exc_info=True)

    threading.Thread(target=run, name="warm-imports", daemon=True).start()
