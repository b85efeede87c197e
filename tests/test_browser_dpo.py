"""Real browser (Debian chromium), issue 30's DPO part: an HTML export is registered and counted by the click that
downloads it, and the downloaded file, opened in the browser, is a document for the customer; an erasure's result
survives a reload as a link to its register entry, which opens on that request, where a re-check's result shows
under the request and the chain verification stays."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from core.db import Database, reset_pool
from tests.conftest import start_streamlit, stop_streamlit
from tests.test_erasure import agents_for, converse, make_store, write_docs

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def dpo_shop(create_database):
    db = Database(create_database(prefix="dpo"))
    store = make_store(db)
    write_docs(store, "C9", 4)
    converse(agents_for(db, store), "C9")
    write_docs(store, "C7", 2)
    proc, url = start_streamlit({"PG_AGENTES": db.dsn, "LOCAL_ROLES": "dpo"})
    db.url = url
    yield db
    stop_streamlit(proc)
    reset_pool(db.dsn)


def test_an_html_export_is_listed_and_counted_by_its_click_and_reads_as_a_document(
    page, dpo_shop, screenshot, tmp_path
):
    page.set_viewport_size({"width": 1280, "height": 1800})
    page.goto(f"{dpo_shop.url}/access?cliente=C9", timeout=120_000)
    expect(page.get_by_text("Qué se exportaría de clientes.C9")).to_be_visible(timeout=60_000)
    export_button = page.get_by_test_id("stDownloadButton").get_by_role("button", name="Exportar y descargar")
    expect(export_button).to_have_count(1, timeout=60_000)
    page.get_by_text("Documento legible (HTML, imprimible a PDF)").click()
    page.wait_for_timeout(1000)  # the format's rerun
    counts = page.get_by_test_id("stDataFrame").first
    label = counts.get_by_role("gridcell", name="Exportaciones anteriores", include_hidden=True)
    expect(label).to_be_attached(timeout=30_000)  # the grid is drawn on a canvas: its cells are
    # in an accessible table inside it, which Playwright counts as hidden
    row_no = label.get_attribute("id").rsplit("-", 1)[1]
    exports_count = counts.locator(f"#glide-cell-1-{row_no}")
    expect(exports_count).to_have_text("0")
    with page.expect_download(timeout=60_000) as info:
        export_button.click()
    path = tmp_path / "export.html"
    info.value.save_as(path)
    # no other click: the rerun of this one shows the export and counts it
    expect(page.get_by_text("Exportaciones registradas de C9")).to_be_visible(timeout=45_000)
    row = dpo_shop.fetch_one("SELECT id, sha256 FROM core_access_register ORDER BY id DESC LIMIT 1")
    exports = page.get_by_test_id("stDataFrame").nth(1)
    expect(exports.get_by_role("gridcell", name=row["sha256"], include_hidden=True)).to_be_attached(timeout=30_000)
    expect(exports_count).to_have_text("1", timeout=30_000)
    screenshot("dpo_access_after_export")

    page.goto(path.as_uri())
    expect(
        page.get_by_role("heading", name="Sus datos en nuestros asistentes de atención (cliente C9)")
    ).to_be_visible()
    for heading in (
        "Responsable del tratamiento",
        "Cuánto tiempo los conservamos",
        "Sus derechos",
        "Sus conversaciones (1)",
    ):  # a section's heading carries its count
        expect(page.get_by_text(heading, exact=True).first).to_be_visible()
    text = page.inner_text("body")
    assert "Agencia Española de Protección de Datos" in text and "El asistente guardó su preferencia: tipo = " in text
    assert not re.search(r"\d{4}-\d{2}-\d{2}T\d{2}:", text) and "memory_writes" not in text.split("Anexo técnico")[0]
    screenshot("dpo_access_export_document")


def test_an_erasure_survives_a_reload_as_its_register_entry(page, dpo_shop, screenshot):
    page.set_viewport_size({"width": 1280, "height": 1800})
    page.goto(f"{dpo_shop.url}/erasure?cliente=C7", timeout=120_000)
    preview = page.get_by_role("button", name="Vista previa (no borra nada)")
    expect(preview).to_be_visible(timeout=60_000)
    preview.click()
    page.get_by_role("button", name="Borrar…").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("textbox").fill("C7")
    dialog.get_by_role("textbox").press("Enter")
    dialog.get_by_role("button", name="Borrar definitivamente").click()
    expect(page.get_by_text("Borrado completo de C7")).to_be_visible(timeout=60_000)
    rid = dpo_shop.fetch_one("SELECT id FROM core_erasure_register WHERE customer_id = 'C7'")["id"]
    expect(page).to_have_url(re.compile(rf"solicitud={rid}"), timeout=30_000)

    page.reload(timeout=120_000)
    expect(page.get_by_text(f"El borrado de esta dirección es la solicitud n.º {rid}")).to_be_visible(timeout=60_000)
    screenshot("dpo_erasure_reloaded")
    page.get_by_text(f"Ver la solicitud n.º {rid} en el registro de borrados").click()
    verify = page.get_by_role("button", name="Verificar la cadena de hashes")
    expect(verify).to_be_visible(timeout=60_000)
    # the picked option is the value of the selectbox's (searchable) combobox input, not text of the widget
    picked = page.get_by_test_id("stMain").get_by_test_id("stSelectbox").get_by_role("combobox", name="Solicitud")
    expect(picked).to_have_value(re.compile(rf"^n\.º {rid} · C7 · "))
    verify.click()
    expect(page.get_by_text("Cadena íntegra")).to_be_visible(timeout=30_000)
    page.get_by_role("button", name="Re-comprobar ahora").click()
    expect(page.get_by_text("Limpio: todas las consultas dan 0")).to_be_visible(timeout=30_000)
    expect(page.get_by_text("Cadena íntegra")).to_be_visible()
    chain_y = page.get_by_text("Cadena íntegra").bounding_box()["y"]
    picked_y = page.get_by_test_id("stMain").get_by_test_id("stSelectbox").bounding_box()["y"]
    result_y = page.get_by_text("Limpio: todas las consultas dan 0").bounding_box()["y"]
    assert chain_y < picked_y < result_y
    screenshot("dpo_erasure_register_recheck")
