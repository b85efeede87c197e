"""Real browser (Debian chromium), issue 24 part 4: on a database where every text the pages show is hostile
(tests/hostile_data.py) and with hostile `?thread=` / `?cliente=` / `?ns=` parameters, no page renders an image
or a link to a foreign host, and the hostile texts are shown as the literal text they are."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from playwright.sync_api import expect

from bench.st_server import wait_painted
from core.db import reset_pool
from tests.conftest import off_loop, start_streamlit, stop_streamlit
from tests.hostile_data import ID, LINKS, LITERAL, write_hostile
from tests.test_browser_erasure import button

pytestmark = pytest.mark.browser

# The value; with a '.', so an id check refuses it (and its message quotes it).
SHORT = "![x](https://attacker.example/p.png) [Verify your SSO session](https://attacker.example)"
FOREIGN = """() => {
  const foreign = (url) => !url.startsWith('data:') && new URL(url, location.href).origin !== location.origin;
  const found = [];
  for (const a of document.querySelectorAll('a')) {
    const href = a.getAttribute('href') ?? a.getAttribute('xlink:href');
    if (href !== null && foreign(href)) found.push(a.outerHTML.slice(0, 200));
  }
  for (const img of document.querySelectorAll('img, image')) {
    const src = img.getAttribute('src') ?? img.getAttribute('href') ?? img.getAttribute('xlink:href') ?? '';
    if (foreign(src) || img.closest('[data-testid=stMarkdownContainer]')) found.push(img.outerHTML.slice(0, 200));
  }
  return found;
}"""


@pytest.fixture(scope="module")
def hostile(create_database):
    written = off_loop(write_hostile, create_database(migrated=False, prefix="hostile"))
    yield written
    reset_pool(written.dsn)


@pytest.fixture(scope="module")
def server(hostile):
    proc, url = start_streamlit({"PG_AGENTES": hostile.dsn})
    yield url
    stop_streamlit(proc)


def visit(page, server: str, path: str, marker: str, **params: str) -> None:
    query = "&".join(f"{k}={quote(v, safe='')}" for k, v in params.items())
    page.goto(f"{server}/{path}" + (f"?{query}" if query else ""))
    expect(page.get_by_text(marker).first).to_be_visible(timeout=60_000)


def inert(page, *literals: str) -> None:
    """No image, no link off this server, no exception; each of `literals` shown as text by a Markdown element."""
    wait_painted(page)  # the script run is over (every element is sent) and its grids and charts are drawn
    expect(page.get_by_test_id("stException")).to_have_count(0)
    for text in literals:
        expect(page.get_by_test_id("stMarkdownContainer").filter(has_text=text).first).to_be_visible()
    assert page.evaluate(FOREIGN) == []


def test_memory(page, server, hostile, screenshot):
    visit(page, server, "memory", "Varios namespaces coinciden", ns=ID)
    inert(page, LITERAL)
    screenshot("hostile-memory")
    visit(page, server, "memory", "Ningún namespace se llama exactamente", ns=SHORT)
    inert(page, LITERAL)


def test_access(page, server, hostile, screenshot):
    visit(page, server, "access", "Fuentes consultadas", cliente=ID)
    inert(page, LITERAL)
    screenshot("hostile-access")
    visit(page, server, "access", "No hay ningún dato sobre", cliente="Z" + ID)
    inert(page, LITERAL)
    visit(page, server, "access", "Id del cliente", cliente=SHORT)
    expect(page.get_by_test_id("stAlertContentError")).to_be_visible()
    inert(page, "![x](https")


def test_checkpoints(page, server, hostile, screenshot):
    visit(page, server, "checkpoints", "Ningún hilo se llama exactamente", thread=SHORT)
    inert(page, LITERAL)
    visit(page, server, "checkpoints", "Línea de tiempo: pasos", thread=hostile.thread_written)
    inert(page, LITERAL)
    screenshot("hostile-checkpoints-thread")
    visit(page, server, "checkpoints", "Ninguna fuente atribuye hilos a", cliente=SHORT)
    inert(page, LITERAL)
    page.get_by_text("Almacenamiento", exact=True).click()
    expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=30_000)
    inert(page)
    # the thread ids on the chart's axis: plotly shows the tags as text
    expect(
        page.locator(".js-plotly-plot text", has_text="<a href='https://attacker.example/html'>").first
    ).to_be_attached()
    screenshot("hostile-checkpoints-storage")


def test_operations_pages(page, server, hostile, screenshot):
    visit(page, server, "preferences", "Por tipo")
    expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=30_000)
    inert(page)
    visit(page, server, "sweeps", "Registro de barridos")
    inert(page)
    # Streamlit's own table export writes cells unneutralised (a thread id "=HYPERLINK(...)" is a formula in a
    # spreadsheet): it is turned off (client.disableDataExport), its toolbar keeps search and full screen
    grid = page.get_by_test_id("stDataFrame").first
    grid.hover()
    toolbar = page.get_by_test_id("stElementToolbar").first
    expect(toolbar.get_by_role("button", name="Search")).to_be_visible()
    expect(toolbar.get_by_role("button", name="Download as CSV")).to_have_count(0)
    visit(page, server, "degradation", "Episodios de degradación")
    expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=30_000)
    inert(page)
    screenshot("hostile-degradation")


def test_erasure_and_its_registers(page, server, hostile, screenshot):
    visit(page, server, "erasure", "Id del cliente", cliente=SHORT)
    button(page, "Vista previa").click()
    expect(page.get_by_test_id("stAlertContentError")).to_be_visible()
    inert(page, "![x](https")

    visit(page, server, "erasure", "Id del cliente", cliente=ID)
    button(page, "Vista previa").click()
    expect(page.get_by_text("Hilos residuales: sin atribuir").first).to_be_visible(timeout=30_000)
    inert(page, LITERAL)
    screenshot("hostile-erasure-preview")
    box = page.get_by_test_id("stVerticalBlock").filter(has_text=hostile.thread_residue).last
    box.get_by_text("Dejar (con motivo)", exact=True).click()
    # the page's answer to the click (a run that redraws the reason field: typing before it arrives is lost)
    expect(box.get_by_text("Escriba el motivo para dejarlo")).to_be_visible(timeout=10_000)
    reason = box.get_by_label("Motivo para dejarlo")
    reason.fill(LINKS)
    reason.press("Enter")
    expect(button(page, "Borrar…")).to_be_enabled(timeout=10_000)
    button(page, "Borrar…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    inert(page, LITERAL)
    dialog.get_by_label("Repita el id del cliente").fill(ID)
    dialog.get_by_label("Repita el id del cliente").press("Enter")
    dialog.get_by_test_id("stButton").filter(has_text="Borrar definitivamente").locator("button").click()
    expect(page.get_by_text("Completo con exclusiones nombradas").first).to_be_visible(timeout=60_000)
    inert(page, LITERAL)
    screenshot("hostile-erasure-result")

    visit(page, server, "erasure-register", "Registro de borrados")
    inert(page, LITERAL)
    screenshot("hostile-erasure-register")
    # the request of ID2 (its residue thread undecided) re-checked: its data came back
    page.get_by_test_id("stMain").get_by_test_id("stSelectbox").click()
    page.get_by_role("option").filter(has_text="n.º 1 ·").click()
    button(page, "Re-comprobar ahora").click()
    expect(page.get_by_text("Han vuelto datos de").first).to_be_visible(timeout=30_000)
    inert(page, LITERAL)
    visit(page, server, "access-register", "Registro de accesos")
    inert(page)
