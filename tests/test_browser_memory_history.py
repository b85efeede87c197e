"""In chromium (issue 56): the Memory page's flags with their rules and counts per store, and a customer's history
with the superseded value struck through and the expired-but-not-swept document said hidden from the agent, in
Spanish and in English (screenshots in test-artifacts/)."""

from __future__ import annotations

import pytest
from conftest import start_streamlit, stop_streamlit
from playwright.sync_api import expect
from test_memory_history_page import shop_db  # noqa: F401  (the module's fixture: H1, F1 and X1 by the retail agent)

pytestmark = pytest.mark.browser

WORDS = {
    "es": {
        "flags": "Memorias que necesitan una revisión",
        "flapping": "Escrito más de 3 veces en los últimos 7 días.",
        "flapping_tab": "Cambia sin parar (2)",
        "history": "Historia de cada documento",
        "expired": "caducado: el agente ya no lo ve (pendiente del barrido)",
        "current": "valor actual",
    },
    "en": {
        "flags": "Memories that need a person's look",
        "flapping": "Written more than 3 times in the last 7 days.",
        "flapping_tab": "Flapping (2)",
        "history": "History of each document",
        "expired": "expired: hidden from the agent (waiting for the sweep)",
        "current": "current value",
    },
}


@pytest.fixture(scope="module")
def server(shop_db):  # noqa: F811
    proc, url = start_streamlit({"PG_AGENTES": shop_db.dsn, "FLAG_FLAPPING_WRITES": "3"})
    yield url
    stop_streamlit(proc)


@pytest.mark.parametrize("lang", ["es", "en"])
def test_flags_and_a_customers_history_in_a_real_browser(server, page, screenshot, lang):
    words = WORDS[lang]
    page.set_viewport_size({"width": 1280, "height": 1800})
    page.goto(f"{server}/memory?lang={lang}")
    flags = page.get_by_role("heading", name=words["flags"])
    expect(flags).to_be_visible(timeout=60_000)  # the whole page above it first (charts), on a loaded 2-core machine
    flags.scroll_into_view_if_needed()
    page.get_by_role("tab", name=words["flapping_tab"]).click()
    panel = page.get_by_role("tabpanel").filter(has_text=words["flapping"])
    expect(panel).to_be_visible()
    # one per store, both listed, each linking to the customer's memory (a link cell's hidden text is its URL)
    for customer in ("F1", "X1"):
        expect(panel.get_by_test_id("stDataFrame").get_by_text(f"ns=clientes.{customer}&")).to_be_attached()
    screenshot(f"memory-flags-{lang}")

    page.goto(f"{server}/memory?lang={lang}&ns=clientes.H1")
    history = page.get_by_role("heading", name=words["history"])
    expect(history).to_be_visible(timeout=60_000)
    struck = page.locator("del", has_text="Sierpes")
    expect(struck).to_be_visible()  # the superseded value, struck through
    expect(page.locator("strong", has_text="Goya")).to_be_visible()
    expect(page.locator("del", has_text="Goya")).to_have_count(0)
    expect(page.get_by_text(words["expired"])).to_be_visible()
    expect(page.get_by_text(words["current"]).first).to_be_visible()
    history.scroll_into_view_if_needed()
    screenshot(f"memory-history-{lang}")
