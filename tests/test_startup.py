"""The embedded database's background start (core.startup) as the dashboard shows it: the page's
shell while it runs, a clear failure page with a retry when it fails. (The shell in a real browser,
from a fresh folder: tests/test_browser_all_pages.py.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from core.config import load_settings
from core.startup import start_in_background

APP = "../dashboard.py"


@pytest.fixture
def embedded_env(monkeypatch):
    """The default embedded mode (no PG_AGENTES), no seed, Streamlit's caches empty."""
    import streamlit as st

    def _use(data_dir: Path) -> None:
        monkeypatch.delenv("PG_AGENTES", raising=False)
        monkeypatch.setenv("AGENT_MEMORY_DATA", str(data_dir))
        monkeypatch.setenv("SEED_DEMO", "0")
        monkeypatch.setenv("DEMO_REPLICAS", "0")
        st.cache_resource.clear()
        st.cache_data.clear()

    yield _use
    st.cache_resource.clear()
    st.cache_data.clear()


def _wait_finished(startup, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not (startup.ready or startup.failed):
        assert time.monotonic() < deadline, f"the start is still {startup.state}"
        time.sleep(0.05)


def test_a_failed_embedded_start_is_a_clear_page_with_a_retry(tmp_path, embedded_env):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the data folder should be")
    embedded_env(blocker)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception
    startup = start_in_background(load_settings())  # the dashboard's own (same process, same folder)
    _wait_finished(startup)
    assert startup.failed and startup.db is None
    at.run()
    assert not at.exception
    assert at.title[0].value == "No se puede abrir la base de datos de los agentes"
    assert "the embedded PostgreSQL did not start" in at.error[0].value
    assert not at.metric  # no figure from a database that never started

    # the retry starts again (a new attempt, not the cached failure), and fails again for the same cause
    at.button(key="startup.retry").click().run()
    again = start_in_background(load_settings())
    assert again is not startup
    _wait_finished(again)
    assert again.failed
    at.run()
    assert at.title[0].value == "No se puede abrir la base de datos de los agentes"


def test_the_start_runs_once_per_process_and_folder(tmp_path, embedded_env):
    blocker = tmp_path / "still-not-a-folder"
    blocker.write_text("x")
    embedded_env(blocker)
    first = start_in_background(load_settings())
    assert start_in_background(load_settings()) is first  # every page run gets the same start
    _wait_finished(first)
    assert start_in_background(load_settings()) is first  # a failure is kept until a retry
    assert start_in_background(load_settings(), retry=True) is not first
