"""Real browser (Debian chromium + Playwright) on a real Streamlit server and the demo database."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from babel.dates import format_date
from babel.numbers import format_decimal
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def es(n: int) -> str:
    return format_decimal(n, locale="es")


def test_memory_page_and_one_namespace(page, dashboard_url, demo_db, screenshot):
    page.goto(dashboard_url)
    expect(page.get_by_role("heading", name="Memoria entre conversaciones")).to_be_visible(timeout=30_000)
    documents = demo_db.fetch_one("SELECT count(*) AS n FROM store")["n"]
    expect(page.get_by_test_id("stMetric").filter(has_text="Documentos guardados")).to_contain_text(es(documents))
    customers = demo_db.fetch_one("SELECT count(DISTINCT prefix) AS n FROM store WHERE prefix LIKE 'clientes.%%'")["n"]
    expect(page.get_by_test_id("stMetric").filter(has_text="Clientes con preferencias")).to_contain_text(es(customers))
    expect(page.locator(".js-plotly-plot")).to_have_count(2, timeout=15_000)
    expect(page.get_by_test_id("stSidebarNav")).to_contain_text("Preferencias")
    screenshot("memory")

    # the >4 documents alarm links each customer to their memory on this page (not to Erasure)
    cid = demo_db.summary.legacy_customers[0]
    page.goto(f"{dashboard_url}/memory?ns=clientes.{cid}")
    expect(page.get_by_text(f"clientes.{cid}: documentos")).to_be_visible(timeout=30_000)
    # the namespace's items (its "Se guarda (días)" column): the history and the flags follow it since issue 56
    items = page.get_by_test_id("stDataFrame").filter(has_text="Se guarda (días)").first
    expect(items.get_by_text("nota-libre").first).to_be_attached()
    page.get_by_text(f"clientes.{cid}: documentos").scroll_into_view_if_needed()
    screenshot("memory-namespace")

    # a partial id suggests the customers that exist; one click opens one
    box = page.get_by_label("Id del cliente, proveedor o empleado (o namespace completo, p. ej. clientes.<id>)")
    box.fill("C1")
    box.press("Enter")
    pills = page.get_by_test_id("stButtonGroup")
    expect(pills).to_contain_text("clientes.C1", timeout=15_000)
    pills.scroll_into_view_if_needed()
    screenshot("memory-suggestions")
    top = demo_db.fetch_one(
        "WITH s AS (SELECT prefix, count(*) AS n FROM store WHERE prefix LIKE 'clientes.C1%%' "
        "GROUP BY prefix ORDER BY prefix LIMIT 10) SELECT * FROM s ORDER BY n DESC, prefix LIMIT 1"
    )
    pills.get_by_text(f"{top['prefix']} ({top['n']})").click()
    expect(box).to_have_value(top["prefix"], timeout=15_000)
    expect(page.get_by_text(f"documentos 1–{top['n']} de {top['n']}")).to_be_visible(timeout=15_000)


def test_preferences_page(page, dashboard_url, screenshot):
    page.goto(f"{dashboard_url}/preferences")
    expect(page.get_by_role("heading", name="Escrituras de preferencias por conversación")).to_be_visible(
        timeout=30_000
    )
    expect(page.locator(".js-plotly-plot")).to_have_count(2, timeout=15_000)
    expect(page.get_by_text("del objetivo (0,1)").first).to_be_visible()
    first_day = date.today() - timedelta(days=29)  # the period's first day labels the chart's axis, in Spanish
    expect(page.locator(".js-plotly-plot").first).to_contain_text(format_date(first_day, "d MMM", locale="es"))
    expect(page.get_by_text("más recientes del periodo").first).to_be_attached()
    expect(page.get_by_test_id("stDataFrame").get_by_text("cliente-C").first).to_be_attached()
    screenshot("preferences")
    applied = page.get_by_role("heading", name="Preferencias aplicadas")
    applied.scroll_into_view_if_needed()
    expect(page.get_by_text("más recientes del periodo").first).to_be_visible()
    screenshot("preferences-applied")


def test_memory_page_in_english(page, dashboard_url, demo_db, screenshot):
    page.goto(f"{dashboard_url}/memory?lang=en")
    expect(page.get_by_role("heading", name="Cross-thread memory")).to_be_visible(timeout=30_000)
    expect(page.get_by_text("What the agents remember")).to_be_visible()
    expect(page.get_by_role("heading", name="Documents by kind of holder")).to_be_visible()
    expect(page.locator(".js-plotly-plot").first).to_contain_text("Customers")
    screenshot("memory-en")
