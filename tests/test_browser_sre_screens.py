"""Real browser on the demo database: what an SRE reads on the Checkpoints diff and Storage view and on the
Degradation page (issue 30), with screenshots under test-artifacts/ to look at."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def _scroll_to(page, heading: str) -> None:
    """Scroll to a heading in one script (Playwright's own scrolling waits for the element to be stable, which a
    page re-rendering its charts on a loaded machine may not be within the timeout)."""
    assert page.evaluate(
        """t => { const h = [...document.querySelectorAll('h1, h2, h3')].find(e => e.textContent.trim() === t);
                                   if (h) h.scrollIntoView({block: 'start'}); return !!h; }""",
        heading,
    )


def test_diff_lists_the_messages_and_the_toggle_reads_whole(page, dashboard_url, demo_db, screenshot):
    thread = demo_db.fetch_one(
        "SELECT thread_id FROM checkpoints WHERE metadata->>'cliente_id' IS NOT NULL "
        "GROUP BY thread_id ORDER BY count(*) DESC, thread_id LIMIT 1"
    )["thread_id"]
    page.goto(f"{dashboard_url}/checkpoints?thread={thread}")
    heading = page.get_by_role("heading", name="Diferencias entre dos checkpoints")
    expect(heading).to_be_visible(timeout=180_000)
    _scroll_to(page, "Diferencias entre dos checkpoints")
    expect(page.get_by_text(re.compile(r"^\d+ canal(es)? cambiados? de \d+\.$"))).to_be_visible()
    expect(
        page.get_by_text(re.compile(r"^Mensajes de\s*messages\s*: \d+ añadidos?, \d+ eliminados?, \d+ cambiados?"))
    ).to_be_visible()
    label = page.get_by_text("Solo canales cambiados", exact=True)
    expect(label).to_be_visible()
    # the whole label is shown: not cut, not wrapped into a narrow column
    assert label.evaluate("e => e.scrollWidth <= e.clientWidth && e.getBoundingClientRect().height < 30")
    grid = page.get_by_test_id("stDataFrame").last
    expect(grid.get_by_text("añadido").first).to_be_attached()
    expect(page.get_by_test_id("stDataFrame").get_by_text("changed", exact=True)).to_have_count(0)
    screenshot("sre-checkpoints-diff")


def test_storage_figures_are_plain_with_their_times(page, dashboard_url, screenshot):
    page.goto(f"{dashboard_url}/checkpoints")
    expect(page.get_by_role("heading", name="Historial de checkpoints de un hilo")).to_be_visible(timeout=180_000)
    page.get_by_text("Almacenamiento", exact=True).click()
    expect(page.get_by_test_id("stMetric").filter(has_text="Total: filas")).to_be_visible(timeout=30_000)
    expect(page.get_by_test_id("stMetric").filter(has_text="Total: en disco")).to_contain_text(
        re.compile(r"\d+,\d [kMG]?B")
    )
    expect(page.get_by_text(re.compile(r"^Tamaño en disco con índices y TOAST, leído ahora: "))).to_be_visible()
    expect(
        page.get_by_text(re.compile(r"^Filas (exactas según el barrido n\.º \d+ \(|contadas ahora, )"))
    ).to_be_visible()
    expect(page.get_by_test_id("stMetricDelta")).to_have_count(0)  # a size is not growth
    expect(page.get_by_role("heading", name="Los 20 hilos más grandes")).to_be_attached()
    expect(page.get_by_text("computed_at")).to_have_count(0)
    screenshot("sre-checkpoints-storage")
    _scroll_to(page, "Los 20 hilos más grandes")
    expect(page.locator(".js-plotly-plot").first.get_by_text("Bytes de checkpoint")).to_be_attached()
    screenshot("sre-checkpoints-largest")


def test_degradation_page_in_words(page, dashboard_url, demo_db, screenshot):
    episodes = demo_db.fetch_one("SELECT count(*) AS n FROM core_degradation_episodes")["n"]
    page.goto(f"{dashboard_url}/degradation")
    expect(page.get_by_role("heading", name="Persistencia degradada de las réplicas")).to_be_visible(timeout=180_000)
    expect(page.get_by_test_id("stMetric").filter(has_text="Episodios")).to_contain_text(str(episodes), timeout=30_000)
    if episodes:
        chart = page.locator(".js-plotly-plot")
        expect(chart).to_have_count(1, timeout=60_000)
        expect(chart.get_by_text("Fecha y hora (UTC)")).to_be_attached()
        expect(page.get_by_text("Episodios numerados por orden de inicio", exact=False)).to_be_visible()
        _scroll_to(page, "Episodios de degradación")
    screenshot("sre-degradation")


def test_times_of_day_in_the_viewers_zone(browser, dashboard_url, browser_context_args):
    """A viewer in Madrid reads Madrid's time, named, on the page and in the sidebar (the server runs in UTC)."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    context = browser.new_context(**{**browser_context_args, "timezone_id": "Europe/Madrid"})
    try:
        page = context.new_page()
        page.goto(f"{dashboard_url}/degradation")
        expect(page.get_by_role("heading", name="Persistencia degradada de las réplicas")).to_be_visible(
            timeout=180_000
        )
        hour = datetime.now(ZoneInfo("Europe/Madrid")).hour
        for text in ("Leído a las", "comprobado a las"):
            # Spanish writes the hour without a leading zero ("0:09:34" just after midnight)
            shown = page.get_by_text(re.compile(rf"^{text} \d{{1,2}}:\d\d:\d\d Europe/Madrid$")).first
            expect(shown).to_be_visible(timeout=30_000)
            assert int(shown.inner_text().split()[-2].split(":")[0]) in (hour, (hour + 1) % 24), shown.inner_text()
        page.screenshot(
            path=str(Path(__file__).resolve().parent.parent / "test-artifacts" / "sre-degradation-madrid.png")
        )
    finally:
        context.close()
