"""Real browser (Debian chromium + Playwright) on the Sweeps page: a run whose process ended mid-run (its row closed
as 'stopped') says that what it deleted was not recorded (the agents' deletes commit before the run's row is written,
in the dashboard's own database since issue 52: its counts in the log are not the run's)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def test_a_stopped_run_says_what_it_deleted_was_not_recorded(page, create_database, screenshot):
    from conftest import start_streamlit, stop_streamlit
    from test_sweep_stopped import killed_mid_run

    from core.db import Database

    db = Database(create_database())
    dead = killed_mid_run(db)
    proc, url = start_streamlit({"PG_AGENTES": db.dsn, "LOCAL_ROLES": "sre"})
    try:
        page.goto(f"{url}/sweeps")
        expect(page.get_by_role("heading", name="Barridos de TTL y retención de checkpoints")).to_be_visible(
            timeout=30_000
        )
        last = page.get_by_test_id("stMetric").filter(has_text=f"Último barrido, n.º {dead}")
        expect(last).to_contain_text("Detenido (su proceso terminó antes: lo que borró no quedó registrado)")
        screenshot("sweeps-stopped-run")
        log = page.get_by_test_id("stDataFrame").last  # the log's status column says it in full
        log.scroll_into_view_if_needed()
        expect(log).to_be_visible()
        screenshot("sweeps-stopped-run-log")
    finally:
        stop_streamlit(proc)
        db.close()
    assert db.fetch_one("SELECT status FROM core_sweep_log WHERE id = %s", (dead,))["status"] == "stopped"
