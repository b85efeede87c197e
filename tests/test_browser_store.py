"""Real browser (Debian chromium + Playwright) on a real Streamlit server and the demo database."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def test_memory_page_and_one_namespace(page, dashboard_url, demo_db, screenshot):
    page.goto(dashboard_url)
    expect(page.get_by_role("heading", name="Memoria entre conversaciones")).to_be_visible(timeout=30_000)
    documents = demo_db.fetch_one("SELECT count(*) AS n FROM store")["n"]
    expect(page.get_by_test_id("stMetric").filter(has_text="Documentos")).to_contain_text(f"{documents:,}")
    expect(page.locator(".js-plotly-plot")).to_have_count(2, timeout=15_000)
    expect(page.get_by_test_id("stSidebarNav")).to_contain_text("Preferencias")
    screenshot("memory")

    cid = demo_db.summary.legacy_customers[0]
    box = page.get_by_label("Namespace (clientes.C9) o id (C9)")
    box.fill(cid)
    box.press("Enter")
    expect(page.get_by_text(f"clientes.{cid}: ")).to_be_visible(timeout=15_000)
    items = page.get_by_test_id("stDataFrame").last
    expect(items.get_by_text("nota-libre").first).to_be_attached()
    page.get_by_text(f"clientes.{cid}: ").scroll_into_view_if_needed()
    screenshot("memory-namespace")


def test_preferences_page(page, dashboard_url, screenshot):
    page.goto(f"{dashboard_url}/preferences")
    expect(page.get_by_role("heading", name="Escrituras de preferencias por conversación")).to_be_visible(timeout=30_000)
    expect(page.locator(".js-plotly-plot")).to_have_count(2, timeout=15_000)
    expect(page.get_by_text("objetivo 0.1").first).to_be_visible()
    expect(page.get_by_test_id("stDataFrame").get_by_text("cliente-C").first).to_be_attached()
    screenshot("preferences")
