"""Real browser (Debian chromium + Playwright): the Memory page's search by meaning on the demo data, and who looked
at a customer's data on Registro de accesos (issue 31 items 3 and 4); on the article's agents, a page with a purpose
required and the search saying there are no vectors."""

from __future__ import annotations

import re

import pytest
from conftest import settings_for, start_streamlit, stop_streamlit
from playwright.sync_api import expect

from core.memory import semantic

pytestmark = pytest.mark.browser
QUESTION = "¿qué clientes prefieren WhatsApp?"


def goto(page, url: str) -> None:
    """Open `url` without waiting for every resource (the machine is shared: a loaded page can take long)."""
    page.goto(url, wait_until="commit", timeout=120_000)


def ask(page, question: str) -> None:
    page.get_by_label("Qué buscar").fill(question)
    page.get_by_role("button", name="Buscar", exact=True).click()


def test_search_by_meaning_then_who_looked(page, dashboard_url, demo_db, screenshot):
    goto(page, f"{dashboard_url}/memory")
    expect(page.get_by_role("heading", name="Buscar en la memoria por significado")).to_be_visible(timeout=90_000)
    ask(page, QUESTION)
    explained = page.get_by_text("Similitud = 1 − distancia coseno")
    expect(explained).to_be_visible(timeout=90_000)
    # the customer the page lists first is the nearest one the search itself finds for that question (the page's
    # default k of 10), and it is one who prefers WhatsApp
    nearest = semantic.search(demo_db, settings_for(demo_db.dsn), QUESTION, "clientes", 10)
    assert "WhatsApp" in nearest["valor"].iloc[0], nearest[["holder", "valor", "similarity"]]
    best = nearest["holder"].iloc[0]
    hits = page.get_by_test_id("stDataFrame").filter(has_text="Similitud")
    expect(hits.get_by_text("WhatsApp").first).to_be_attached()
    # first row: the grid's accessible cells hold a link column's URL (its display text is drawn on the canvas)
    expect(hits.get_by_test_id("glide-cell-0-0")).to_have_text(re.compile(rf"/memory\?ns=clientes\.{best}(&|$)"))
    expect(hits.get_by_test_id("glide-cell-2-0")).to_contain_text("WhatsApp")
    page.get_by_role("heading", name="Buscar en la memoria por significado").scroll_into_view_if_needed()
    screenshot("memory-semantic-search")

    # the search's results and opening a customer's memory are in the DPO's log, by customer
    goto(page, f"{dashboard_url}/memory?ns=clientes.{best}")
    expect(page.get_by_text(f"clientes.{best}: documentos")).to_be_visible(timeout=90_000)
    goto(page, f"{dashboard_url}/access-register")
    page.get_by_role("tab", name="Quién ha mirado los datos").click()
    page.get_by_label("Cliente").fill(best)
    page.get_by_label("Cliente").press("Enter")
    views = page.get_by_test_id("stDataFrame").filter(has_text="Objeto")
    expect(views.get_by_text("memoria del titular").first).to_be_attached(timeout=90_000)  # other tests may look too
    expect(views.get_by_text("resultado de búsqueda").first).to_be_attached()
    page.get_by_role("button", name="Verificar la cadena").last.click()
    expect(page.get_by_text("Cadena íntegra").last).to_be_visible(timeout=90_000)
    screenshot("access-register-who-looked")


def test_article_agents_purpose_required_and_no_vectors(page, article_agents_db, screenshot):
    proc, url = start_streamlit({"PG_AGENTES": article_agents_db.dsn, "DATA_VIEWS_PURPOSE": "1"})
    try:
        goto(page, f"{url}/memory?ns=clientes.C9")
        expect(page.get_by_text("Escriba la finalidad de la consulta").first).to_be_visible(timeout=90_000)
        expect(page.get_by_text("clientes.C9: documentos")).to_have_count(0)
        purpose = page.get_by_role("textbox", name="Finalidad de la consulta", exact=True)  # not its help button
        purpose.fill("reclamación 1234")
        purpose.press("Enter")
        expect(page.get_by_text("clientes.C9: documentos")).to_be_visible(timeout=90_000)
        ask(page, "correo")
        expect(page.get_by_text("Esta memoria no tiene vectores")).to_be_visible(timeout=90_000)
        page.get_by_role("heading", name="Buscar en la memoria por significado").scroll_into_view_if_needed()
        screenshot("memory-article-agents-purpose")
    finally:
        stop_streamlit(proc)
