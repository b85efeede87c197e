"""Real browser (Debian chromium + Playwright) on a real Streamlit server: a DeltaChannel thread's values
between snapshots on the Checkpoints page (issue 28)."""

from __future__ import annotations

import pytest
from conftest import start_streamlit, stop_streamlit
from format_agents import delta_thread
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def delta_url(create_database):
    dsn = create_database(prefix="bdelta")
    delta_thread(dsn, "delta-1")
    proc, url = start_streamlit({"PG_AGENTES": dsn})
    yield url
    stop_streamlit(proc)


def test_a_delta_threads_rebuilt_values_are_shown(page, delta_url, screenshot):
    page.set_viewport_size({"width": 2200, "height": 1800})  # glide draws only the cells in view
    page.goto(f"{delta_url}/checkpoints?thread=delta-1")
    expect(page.get_by_role("heading", name="Canales delta del hilo")).to_be_visible(timeout=30_000)
    grid = page.get_by_test_id("stDataFrame")
    screenshot("checkpoints-delta-channels")
    expect(grid.get_by_text("concatenación de listas")).to_be_attached()
    expect(grid.get_by_text("mensajes (reemplazo por id, RemoveMessage)")).to_be_attached()
    page.get_by_role("heading", name="Diferencias entre dos checkpoints").scroll_into_view_if_needed()
    # the latest checkpoint holds no value for `items` (between snapshots): the diff shows langgraph's value
    expect(grid.get_by_text('"item-9"', exact=False).first).to_be_attached()
    screenshot("checkpoints-delta-diff")
