"""Real browser (Debian chromium + Playwright) on the Sweeps page of the demo database.

The demo database is shared by the session, so this test opens the manual sweep dialog but does not
run it (the AppTest in test_sweeps_page.py runs a manual sweep on its own database)."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def test_sweeps_page_renders_its_charts_and_the_dialog(page, dashboard_url, demo_db, screenshot):
    # Through the dashboard's navigation, as an SRE would arrive.
    page.goto(dashboard_url)
    expect(page.get_by_test_id("stSidebarNav")).to_contain_text("Barridos", timeout=30_000)
    page.get_by_test_id("stSidebarNav").get_by_role("link", name="Barridos").click()
    expect(page.get_by_role("heading", name="Barridos de TTL y retención de checkpoints")).to_be_visible(timeout=30_000)
    assert "/sweeps" in page.url
    expect(page.locator(".js-plotly-plot")).to_have_count(3, timeout=15_000)
    expired = demo_db.fetch_one("SELECT count(*) AS n FROM store WHERE prefix LIKE 'proveedores.%%' "
                                "AND expires_at < now()")["n"]
    assert expired > 0
    expect(page.get_by_test_id("stMetric").filter(has_text="proveedores: caducados")).to_contain_text(str(expired))
    # The forecast has bars (plotly draws one path per bar) and the log lists the demo's run.
    expect(page.locator(".js-plotly-plot").nth(2).locator(".bars path").first).to_be_attached()
    expect(page.get_by_test_id("stDataFrame").last.get_by_text("demo").first).to_be_attached()
    screenshot("sweeps")
    page.get_by_text("Registro de barridos").scroll_into_view_if_needed()
    screenshot("sweeps-log")

    page.get_by_role("button", name="Barrer ahora").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Barrido manual", timeout=15_000)
    expect(dialog.get_by_role("button", name="Ejecutar barrido")).to_be_disabled()
    screenshot("sweeps-dialog")
