"""Real browser (Debian chromium + Playwright): the read replica's lag in the sidebar and the
"as of" note above the page, on a real Streamlit server reading from a real streaming standby."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.conftest import start_streamlit, stop_streamlit
from tests.test_read_replica import write_docs

pytestmark = pytest.mark.browser


@pytest.fixture
def lagging_dashboard(replica_pair):
    database = replica_pair.database()
    write_docs(database, "C1", 6)
    replica_pair.wait_replayed()
    replica_pair.standby.pause_replay()
    write_docs(database, "C2", 4)  # on the primary only, until replay resumes
    proc, url = start_streamlit(
        {"PG_AGENTES": database.dsn, "PG_AGENTES_REPLICA": database.read_dsn, "REPLICA_MAX_LAG_S": "0"}
    )
    yield url
    stop_streamlit(proc)
    replica_pair.standby.resume_replay()


def test_replica_lag_in_the_sidebar_and_as_of_note(page, lagging_dashboard, screenshot):
    page.goto(lagging_dashboard)
    expect(page.get_by_role("heading", name="Memoria entre conversaciones")).to_be_visible(timeout=30_000)
    sidebar = page.get_by_test_id("stSidebar")
    expect(sidebar).to_contain_text("Réplica de lectura", timeout=15_000)
    expect(sidebar).to_contain_text(re.compile(r"retraso [\d,]+ bytes, \d+\.\d s"))
    expect(page.get_by_text(re.compile(r"Datos de la réplica de lectura a las \d{1,2}:\d\d:\d\d"))).to_be_visible()
    # the page shows the replica's data: the 6 replayed documents, not the 4 it has not replayed
    expect(page.get_by_test_id("stMetric").filter(has_text="Documentos")).to_contain_text("6", timeout=30_000)
    expect(page.locator(".js-plotly-plot")).to_have_count(2, timeout=30_000)
    screenshot("replica-lag")
