"""Real browser (Debian chromium): a DPO erases a demo customer and the page shows both zero-count
queries with 0; a manager's server does not serve the page. Runs its own server on its own demo
database, so the session's shared demo data stays untouched for the other browser tests."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from core.db import Database, reset_pool
from core.privacy import evidence
from tests.conftest import off_loop, settings_for, start_streamlit, stop_streamlit

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def erasure_demo(create_database):
    from core.demo.seed import ensure_demo

    database = Database(create_database(prefix="erasure"))
    # 24 customers: with 16, the demo's practice threads and shared values (issue 40) leave every customer not
    # erased by the demo with a residue thread; this module's plain flow needs one without
    summary = off_loop(ensure_demo, database, settings_for(database.dsn), customers=24)
    assert summary is not None
    database.summary = summary
    erased = {r["customer_id"] for r in database.fetch("SELECT customer_id FROM core_erasure_register")}
    assert erased == {e.customer_id for e in summary.month.erasures} and erased  # the demo's own erasures
    rows = database.fetch(
        "SELECT split_part(prefix, '.', 2) AS c FROM store WHERE prefix LIKE 'clientes.%%' "
        "AND split_part(prefix, '.', 2) <> ALL(%s) GROUP BY 1 ORDER BY count(*) DESC, 1",
        (list(erased | set(summary.legacy_customers)),),
    )
    # The plain flow: the customer with most documents whose preview proposes no residue thread (a
    # pickup store another conversation mentions can make one; tests/test_browser_erasure_residue.py
    # decides those).
    database.customer = next(r["c"] for r in rows if not evidence.preview(database, r["c"]).residue_threads)
    yield database
    reset_pool(database.dsn)


@pytest.fixture(scope="module")
def server(erasure_demo):
    proc, url = start_streamlit({"PG_AGENTES": erasure_demo.dsn})
    yield url
    stop_streamlit(proc)


def button(page, text: str):
    return page.get_by_test_id("stButton").filter(has_text=text).locator("button")


def test_dpo_erases_a_demo_customer_in_the_browser(page, server, erasure_demo, screenshot):
    db, cid = erasure_demo, erasure_demo.customer
    before = db.fetch_one("SELECT count(*) AS n FROM store WHERE prefix = %s", (f"clientes.{cid}",))["n"]
    assert before > 0
    page.goto(server)  # through the dashboard's navigation, as a DPO would
    nav = page.get_by_test_id("stSidebarNav")
    expect(nav.get_by_text("Protección de datos")).to_be_visible(timeout=30_000)
    nav.get_by_role("link", name=re.compile("^Borrado")).first.click()
    expect(page.get_by_text("Borrar todo lo que los agentes recuerdan de un cliente")).to_be_visible(timeout=30_000)
    expect(page.get_by_text("Modo local: sin proveedor de identidad")).to_be_visible()
    field = page.get_by_label("Id del cliente (p. ej. C9)")
    field.fill(cid)
    field.press("Enter")
    button(page, "Vista previa").click()
    expect(page.get_by_text(f"Qué se borraría de clientes.{cid}")).to_be_visible(timeout=20_000)
    expect(page.get_by_test_id("stDataFrame").first.get_by_text("store_vectors", exact=True)).to_have_count(1)

    button(page, "Borrar…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_text("Confirmar el borrado")).to_be_visible(timeout=10_000)
    dialog.get_by_label("Repita el id del cliente").fill(cid)
    dialog.get_by_label("Repita el id del cliente").press("Enter")
    dialog.get_by_test_id("stButton").filter(has_text="Borrar definitivamente").locator("button").click()

    expect(page.get_by_text(f"Borrado completo de {cid}")).to_be_visible(timeout=30_000)
    codes = page.get_by_test_id("stCode")
    store_sql = (
        f"SELECT count(*) AS n FROM store WHERE prefix = 'clientes.{cid}' OR prefix LIKE 'clientes.{cid}.%' ESCAPE '\\'"
    )
    vectors_sql = store_sql.replace("FROM store ", "FROM store_vectors ")
    expect(codes.filter(has_text=store_sql)).to_have_count(1)
    expect(codes.filter(has_text=vectors_sql)).to_have_count(1)
    results = page.get_by_text(
        re.compile(r"^Resultado: 0 · ejecutada el \d{1,2} [a-z]{3} 20\d\d, \d{1,2}:\d\d:\d\d")
    ).filter(visible=True)
    expect(results).to_have_count(2)
    expect(page.get_by_test_id("stDownloadButton")).to_be_visible()
    page.wait_for_timeout(500)  # let the toast and the table settle for the screenshot
    shot = screenshot("erasure_dpo_complete")
    assert shot.stat().st_size > 10_000

    for sql in (store_sql, vectors_sql):
        assert db.fetch_one(sql)["n"] == 0
    assert db.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE metadata->>'cliente_id' = %s", (cid,))["n"] == 0
    row = db.fetch_one("SELECT * FROM core_erasure_register WHERE customer_id = %s", (cid,))
    assert row["status"] == "complete" and row["operator"] == "local"

    nav.get_by_role("link", name=re.compile("Registro de borrados")).click()
    expect(page.get_by_role("heading", name="Registro de borrados")).to_be_visible(timeout=30_000)
    requests = db.fetch_one("SELECT count(*) AS n FROM core_erasure_register")["n"]
    assert requests == len(db.summary.month.erasures) + 1  # the demo's, and this one
    expect(page.get_by_test_id("stMetric").filter(has_text="Solicitudes")).to_contain_text(str(requests))
    screenshot("erasure_register")


def test_a_manager_opening_the_erasure_url_is_refused(page, erasure_demo, screenshot):
    """A manager's navigation has no erasure page, so its URL falls back to the default page; the
    page's own role check (tested directly in test_erasure_pages) refuses it server-side too. A URL that names no
    page (`/erasure_register`, the page is `/erasure-register`) says 'Página no encontrada' (test_browser_daily_use)."""
    requests = erasure_demo.fetch_one("SELECT count(*) AS n FROM core_erasure_register")["n"]
    proc, url = start_streamlit({"PG_AGENTES": erasure_demo.dsn, "LOCAL_ROLES": "manager"})
    try:
        for path in ("erasure", "erasure_register", "erasure-register"):
            page.goto(f"{url}/{path}")
            page.wait_for_load_state("networkidle")
            shown = page.get_by_text("Esta página requiere el rol «dpo».").or_(
                page.get_by_role("heading", name="Memoria entre conversaciones")
            )
            if path == "erasure_register":  # no page at this URL, for anyone
                shown = page.get_by_role("heading", name="Página no encontrada")
            expect(shown).to_be_visible(timeout=30_000)
            expect(page.get_by_text("Borrar todo lo que los agentes recuerdan de un cliente")).to_have_count(0)
            expect(page.get_by_text("Registro de borrados", exact=True)).to_have_count(0)
            expect(page.get_by_label("Id del cliente (p. ej. C9)")).to_have_count(0)
            screenshot(f"erasure_manager_refused_{path.replace('-', '_')}")
    finally:
        stop_streamlit(proc)
    assert erasure_demo.fetch_one("SELECT count(*) AS n FROM core_erasure_register")["n"] == requests
