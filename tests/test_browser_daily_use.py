"""Real browser on the demo database, issue 54 finding 8 ("Daily use reads right"): what only a browser shows. A
mistyped page URL says the page was not found (in the page's language) instead of silently opening the first page;
the metric labels of the Sweeps page and of the thread search are read whole, not cut with an ellipsis at the
1280-pixel viewport. Screenshots under test-artifacts/ (daily-use-*.png) to look at."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from bench.st_server import wait_painted

pytestmark = pytest.mark.browser


@pytest.fixture(scope="session")
def browser_context_args():
    """A browser in Madrid, as the finding's: the Sweeps page names the zone of its last run's time."""
    return {"viewport": {"width": 1280, "height": 1400}, "locale": "es-ES", "timezone_id": "Europe/Madrid"}


# (language, the not-found heading, the first page's heading that must not open instead)
NOT_FOUND = [
    ("es", "Página no encontrada", "Memoria entre conversaciones"),
    ("en", "Page not found", "Cross-thread memory"),
]
# every metric label's text element whose text overflows its box (the grid draws "…" over what is cut)
CUT_LABELS = """() => [...document.querySelectorAll('[data-testid="stMetricLabel"]')]
    .filter(e => [e, ...e.querySelectorAll('*')].some(x => x.scrollWidth > x.clientWidth + 1))
    .map(e => e.textContent.trim())"""


@pytest.mark.parametrize("lang, heading, first_page", NOT_FOUND)
def test_a_mistyped_page_url_says_not_found(page, dashboard_url, screenshot, lang, heading, first_page):
    page.goto(f"{dashboard_url}/erasure_register?lang={lang}")  # the page is /erasure-register
    expect(page.get_by_role("heading", name=heading)).to_be_visible(timeout=180_000)
    expect(page.get_by_text("/erasure_register").first).to_be_visible()
    expect(page.get_by_role("heading", name=first_page)).to_have_count(0)
    expect(page.get_by_role("dialog")).to_have_count(0)  # not Streamlit's own "Page not found" box, in English
    screenshot(f"daily-use-not-found-{lang}")


@pytest.mark.parametrize("lang", ["es", "en"])
@pytest.mark.parametrize("path, ready", [("sweeps", "stMetric"), ("checkpoints?view=search", "stMetric")])
def test_metric_labels_are_read_whole(page, dashboard_url, screenshot, lang, path, ready):
    page.goto(f"{dashboard_url}/{path}{'&' if '?' in path else '?'}lang={lang}")
    expect(page.get_by_test_id(ready).first).to_be_visible(timeout=180_000)
    wait_painted(page)  # every metric of the page drawn (the run is over), in its font
    assert page.get_by_test_id("stMetric").count() >= 4
    screenshot(f"daily-use-labels-{path.split('?')[0]}-{lang}")
    assert page.evaluate(CUT_LABELS) == []
