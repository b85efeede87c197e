"""Real browser (Debian chromium + Playwright) on a real Streamlit server: the SRE's "which threads are stuck on an
interrupt?" and "which errored in the last hour?" as one click each on the Checkpoints page, the search's URL opened
in a fresh tab, and the tokens and cost view saying "no usage data" and "no price" (tests/search_agents.py's
threads: a stock create_agent from the article and our retail agent)."""

from __future__ import annotations

import json

import pytest
from conftest import ARTIFACTS, start_streamlit, stop_streamlit
from playwright.sync_api import expect
from search_agents import PRICED_MODEL, UNPRICED_MODEL
from test_thread_search import written  # noqa: F401  (the module's database)

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def search_url(written):  # noqa: F811 (the imported fixture)
    db, _, _ = written
    prices = json.dumps({PRICED_MODEL: {"input": 0.15, "output": 0.6, "cached_input": 0.075}})
    proc, url = start_streamlit({"PG_AGENTES": db.dsn, "MODEL_PRICES": prices})
    yield url
    stop_streamlit(proc)


def results(page):
    return page.get_by_test_id("stDataFrame").first


def test_stuck_and_errored_in_one_click_and_by_url(page, search_url, screenshot, context):
    page.set_viewport_size({"width": 1400, "height": 1300})
    page.goto(f"{search_url}/checkpoints")
    expect(page.get_by_role("heading", name="Historial de checkpoints de un hilo")).to_be_visible(timeout=30_000)
    page.get_by_text("Buscar y filtrar", exact=True).click()
    page.get_by_role("button", name="Detenidos en una interrupción o pausa").click()
    expect(page.get_by_test_id("stMetric").filter(has_text="Hilos encontrados")).to_contain_text("2", timeout=30_000)
    expect(results(page).get_by_text("conv-hitl")).to_be_attached()
    expect(results(page).get_by_text("cliente-C2-1")).to_be_attached()
    expect(results(page).get_by_text("conv-roto")).to_have_count(0)
    assert "status=stopped" in page.url and "view=search" in page.url
    screenshot("checkpoints-search-stuck")

    page.get_by_role("button", name="Con error en la última hora").click()
    expect(results(page).get_by_text("conv-roto")).to_be_attached(timeout=30_000)
    expect(results(page).get_by_text("cliente-C3-1")).to_be_attached()
    expect(results(page).get_by_text("conv-hitl")).to_have_count(0)
    shared = page.url
    assert "status=error" in shared and "window=1h" in shared

    other = context.new_page()  # the link, opened as a colleague would
    other.set_viewport_size({"width": 1400, "height": 1300})
    other.goto(shared)
    expect(other.get_by_test_id("stMetric").filter(has_text="Hilos encontrados")).to_contain_text("2", timeout=30_000)
    expect(other.get_by_test_id("stDataFrame").first.get_by_text("conv-roto")).to_be_attached()
    other.screenshot(path=str(ARTIFACTS / "checkpoints-search-errored-shared.png"), full_page=True)


def test_cost_view_never_shows_missing_usage_as_free(page, search_url, screenshot):
    page.set_viewport_size({"width": 2200, "height": 1800})  # glide draws only the columns in view: the note is last
    page.goto(f"{search_url}/checkpoints?view=cost")
    expect(page.get_by_role("heading", name="Tokens y coste")).to_be_visible(timeout=30_000)
    expect(page.get_by_text(f"Sin precio (su coste no está sumado): {UNPRICED_MODEL}")).to_be_visible(timeout=30_000)
    threads = page.get_by_test_id("stDataFrame").last
    threads.scroll_into_view_if_needed()
    expect(threads.get_by_text("Sin datos de uso").first).to_be_attached()
    expect(page.locator(".js-plotly-plot")).to_have_count(1)
    screenshot("checkpoints-cost")
