"""Every page in both languages in a real browser, on the demo data: the page renders (its title,
no exception box, its tables with translated headers) and a screenshot is saved for a person to
look at (test-artifacts/page-<name>-<lang>.png)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

PAGES = {  # url path -> (Spanish title, English title)
    "memory": ("Memoria entre conversaciones", "Cross-thread memory"),
    "preferences": ("Escrituras de preferencias por conversación", "Preference writes per conversation"),
    "sweeps": (None, None),
    "checkpoints": ("Historial de checkpoints de un hilo", None),
    "degradation": (None, None),
    "erasure": (None, None),
    "erasure-register": ("Registro de borrados", None),
}


@pytest.mark.parametrize("lang", ["es", "en"])
@pytest.mark.parametrize("path", list(PAGES))
def test_page_renders_in_both_languages(dashboard_url, page, screenshot, path, lang):
    # dashboard_url first: its demo seed runs the agents synchronously, before playwright's loop starts
    page.goto(f"{dashboard_url}/{path}?lang={lang}")
    heading = page.get_by_test_id("stHeading").first
    expect(heading).to_be_visible(timeout=30_000)
    title = PAGES[path][0 if lang == "es" else 1]
    if title:
        expect(page.get_by_role("heading", name=title)).to_be_visible(timeout=30_000)
    # generous: on a loaded machine the sidebar's widgets may paint seconds after the page's heading
    expect(page.get_by_test_id("stSidebar").get_by_text("Idioma" if lang == "es" else "Language").first).to_be_visible(
        timeout=30_000
    )
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(1500)  # let charts and grids paint for the screenshot (the checks above waited on conditions)
    expect(page.get_by_test_id("stException")).to_have_count(0)
    for raw in ("thread_id", "cliente_id", "customer_id", "replica_id", "last_write", "buffered_checkpoints"):
        expect(page.get_by_test_id("stDataFrame").get_by_text(raw, exact=True)).to_have_count(0)
    screenshot(f"page-{path}-{lang}")
