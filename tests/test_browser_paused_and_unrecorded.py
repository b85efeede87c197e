"""Real browser (Debian chromium + Playwright) on a real Streamlit server: threads paused by a static interrupt named
as such with their next node on the Checkpoints page (tests/test_thread_paused.py's graphs), and the DPO told on
Registro de accesos how many views of customer data were not recorded, and since when."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from conftest import start_streamlit, stop_streamlit
from playwright.sync_api import expect
from test_thread_paused import written  # noqa: F401  (the module's database)

from core.db import Database

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(written):  # noqa: F811 (the imported fixture)
    db, _, _ = written
    proc, url = start_streamlit({"PG_AGENTES": db.dsn})
    yield db, url
    stop_streamlit(proc)


def test_paused_threads_are_named_with_their_next_node(page, server, screenshot):
    _, url = server
    page.set_viewport_size({"width": 1600, "height": 1300})
    page.goto(f"{url}/checkpoints?view=search")
    page.get_by_role("button", name="Detenidos en una interrupción o pausa").click()
    # written seconds ago: the interrupt is stuck at once, the breakpoints are running until 15 min have passed
    expect(page.get_by_test_id("stMetric").filter(has_text="Hilos encontrados")).to_contain_text("1", timeout=30_000)
    results = page.get_by_test_id("stDataFrame").first
    expect(results.get_by_text("Interrumpido (espera respuesta)")).to_be_attached()
    expect(results.get_by_text("antes-de-revisar")).to_have_count(0)
    assert "status=stopped" in page.url
    page.goto(f"{url}/checkpoints?view=search&status=running")
    expect(page.get_by_test_id("stMetric").filter(has_text="Hilos encontrados")).to_contain_text("3", timeout=30_000)
    results = page.get_by_test_id("stDataFrame").first
    expect(results.get_by_text("antes-de-revisar")).to_be_attached()
    expect(results.get_by_text("En curso (últimos 15 min)").first).to_be_attached()
    expect(results.get_by_text("revisar", exact=True).first).to_be_attached()
    expect(results.get_by_text("terminado")).to_have_count(0)
    screenshot("checkpoints-search-paused")


def test_the_dpo_sees_views_not_recorded(page, server, screenshot):
    db, url = server
    since = datetime(2026, 12, 4, 9, 30, tzinfo=UTC)
    # what a dashboard writes with its next write after losing views (core.privacy.data_views)
    db.execute(
        "INSERT INTO core_data_view_gaps (views, since, until, process, reason) VALUES (%s, %s, %s, %s, %s)",
        (7, since, since + timedelta(minutes=5), "dashboard-0:41", "the dashboard's queue of views was full"),
    )
    page.set_viewport_size({"width": 1400, "height": 1300})
    page.goto(f"{url}/access-register")
    page.get_by_role("tab", name="Quién ha mirado los datos").click()
    warning = page.get_by_text("7 consultas de datos de clientes no quedaron registradas desde")
    expect(warning).to_be_visible(timeout=30_000)
    expect(warning).to_contain_text("4 dic 2026, 9:30:00 UTC")
    screenshot("access-register-unrecorded")
    Database(db.dsn).execute("DELETE FROM core_data_view_gaps")
