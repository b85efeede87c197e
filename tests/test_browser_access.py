"""Real browser (Debian chromium): shareable links work for every role that may see the page.
A DPO-only user opens /access?cliente=<id> directly, exports, and the downloaded JSON parses and matches
SQL; the same user opens /erasure?cliente=<id> directly and lands on Erasure with the id filled in (before,
Streamlit answered "Page not found" because Erasure was that user's default page); a manager opening
either URL is refused with the role named."""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from playwright.sync_api import expect

from bench.st_server import wait_idle
from core.db import Database, reset_pool
from tests.conftest import settings_for, start_streamlit, stop_streamlit
from tests.test_access import sql_counts

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def access_demo(create_database):
    from core.demo.seed import ensure_demo

    database = Database(create_database(prefix="access"))
    # in a worker thread: pytest-playwright's session loop runs in this one, where the seed's sync saver refuses
    with ThreadPoolExecutor(1) as pool:
        summary = pool.submit(ensure_demo, database, settings_for(database.dsn), customers=16).result()
    assert summary is not None
    row = database.fetch_one(
        "SELECT subject_id AS c FROM core_conversations WHERE subject_root = 'clientes' AND subject_id NOT IN "
        "(SELECT customer_id FROM core_erasure_register) GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1"
    )
    database.customer = row["c"]
    yield database
    reset_pool(database.dsn)


@pytest.fixture
def server_for(access_demo):
    procs = []

    def _start(local_roles: str) -> str:
        proc, url = start_streamlit({"PG_AGENTES": access_demo.dsn, "LOCAL_ROLES": local_roles})
        procs.append(proc)
        return url

    yield _start
    for proc in procs:
        stop_streamlit(proc)


def test_a_dpo_opens_shareable_links_and_exports(page, server_for, access_demo, screenshot):
    db, cid = access_demo, access_demo.customer
    url = server_for("dpo")  # a DPO-only user: Erasure is the first page of their role

    page.goto(f"{url}/erasure?cliente={cid}")
    expect(page.get_by_text("Borrar todo lo que los agentes recuerdan de un cliente")).to_be_visible(timeout=30_000)
    expect(page.get_by_label("Id del cliente (p. ej. C9)")).to_have_value(cid)
    expect(page.get_by_text("Page not found")).to_have_count(0)
    assert page.url.startswith(f"{url}/erasure") and f"cliente={cid}" in page.url
    screenshot("access_dpo_erasure_link")

    page.goto(f"{url}/access?cliente={cid}")
    expect(page.get_by_role("heading", name="Derecho de acceso")).to_be_visible(timeout=30_000)
    expect(page.get_by_label("Id del cliente (p. ej. C9)")).to_have_value(cid)
    expect(page.get_by_text(f"Qué se exportaría de clientes.{cid}")).to_be_visible(timeout=30_000)
    expect(page.get_by_text("Page not found")).to_have_count(0)
    nav = page.get_by_test_id("stSidebarNav")
    expect(nav.get_by_role("link", name="Acceso", exact=True)).to_be_visible()
    expect(nav.get_by_text("Memoria", exact=True)).to_have_count(0)  # not the DPO's: hidden from the menu
    before = db.fetch_one("SELECT count(*) AS n FROM core_access_register")["n"]
    expires = db.fetch("SELECT key, expires_at FROM store WHERE prefix = %s ORDER BY key", (f"clientes.{cid}",))

    export_button = page.get_by_test_id("stDownloadButton").get_by_role("button", name="Exportar y descargar")
    expect(export_button).to_have_count(1, timeout=30_000)
    expect(page.get_by_test_id("stDataFrame").first).to_be_visible(timeout=30_000)
    screenshot("access_dpo_counts")
    with page.expect_download(timeout=60_000) as info:
        export_button.click()
    download = info.value
    data = open(download.path(), "rb").read()
    doc = json.loads(data)
    expected = sql_counts(db, cid)
    assert {k: doc["cover"]["counts"][k] for k in expected} == expected
    assert len(doc["store_documents"]) == expected["documents"] > 0
    assert (
        sum(1 for t in doc["threads"] for m in t["messages"] if m["kind"] not in ("refused", "undecodable"))
        == expected["messages"]
        > 0
    )
    assert doc["cover"]["requested_by"] == "local" and doc["cover"]["customer_id"] == cid
    row = db.fetch_one("SELECT * FROM core_access_register ORDER BY id DESC LIMIT 1")
    assert db.fetch_one("SELECT count(*) AS n FROM core_access_register")["n"] == before + 1
    assert row["sha256"] == hashlib.sha256(data).hexdigest() and row["customer_id"] == cid
    assert db.fetch("SELECT key, expires_at FROM store WHERE prefix = %s ORDER BY key", (f"clientes.{cid}",)) == expires
    expect(page.get_by_text(f"Exportaciones registradas de {cid}")).to_be_visible(timeout=30_000)
    page.wait_for_timeout(500)  # let the table settle for the screenshot
    screenshot("access_dpo_exported")

    page.goto(f"{url}/access-register")
    expect(page.get_by_role("heading", name="Registro de accesos")).to_be_visible(timeout=30_000)
    verify = page.get_by_test_id("stButton").get_by_role("button", name="Verificar la cadena de hashes")
    expect(verify).to_have_count(1, timeout=30_000)  # the previous page's elements are gone
    verify.click()
    expect(page.get_by_text("Cadena íntegra: 1 filas selladas")).to_be_visible(timeout=30_000)
    screenshot("access_register_verified")


def test_a_manager_opening_either_url_is_refused_with_the_role_named(page, server_for, access_demo, screenshot):
    cid = access_demo.customer
    url = server_for("manager")
    for path in ("access", "erasure"):
        page.goto(f"{url}/{path}?cliente={cid}")
        expect(page.get_by_text("Esta página requiere el rol «dpo».")).to_be_visible(timeout=30_000)
        expect(page.get_by_text("Page not found")).to_have_count(0)
        expect(page.get_by_label("Id del cliente (p. ej. C9)")).to_have_count(0)
        expect(page.get_by_test_id("stDownloadButton")).to_have_count(0)
        screenshot(f"access_manager_refused_{path}")
    nav = page.get_by_test_id("stSidebarNav")
    expect(nav.get_by_text("Memoria", exact=True)).to_be_visible()
    expect(nav.get_by_text("Acceso", exact=True)).to_have_count(0)
    expect(nav.get_by_text("Protección de datos")).to_have_count(0)


def test_a_dpo_exports_html_then_json_then_html_again(page, server_for, access_demo, screenshot):
    """Issue 54 #1: a second export after changing the format did nothing (no file, no message, no register row;
    the server logged `Deferred file ... not found`). Each of three exports in a row, the format changed between
    them, downloads its own document and registers it."""
    db, cid = access_demo, access_demo.customer
    url = server_for("dpo")
    before = db.fetch_one("SELECT coalesce(max(id), 0) AS id FROM core_access_register")["id"]
    page.goto(f"{url}/access?cliente={cid}")
    expect(page.get_by_role("heading", name="Derecho de acceso")).to_be_visible(timeout=30_000)
    expect(page.get_by_test_id("stDataFrame").first).to_be_visible(timeout=30_000)
    labels = {"html": "Documento legible (HTML, imprimible a PDF)", "json": "JSON (legible por máquina)"}
    downloads: list[tuple[str, bytes]] = []
    for n, fmt in enumerate(("html", "json", "html"), start=1):
        page.get_by_test_id("stRadio").get_by_text(labels[fmt], exact=True).click()
        expect(page.get_by_test_id("stRadio").get_by_role("radio", name=labels[fmt])).to_be_checked()
        # the button names the file it makes (format and language): once it names the format chosen, the run that
        # drew it has replaced the previous button and its file (a wait for "the run is idle" could end before the
        # radio's run began: the JSON export then downloaded the HTML file, under load, 2026-12-07)
        chosen = page.get_by_test_id("stDownloadButton").get_by_role(
            "button", name=f"Exportar y descargar: {fmt.upper()}, Español", exact=True
        )
        expect(chosen).to_be_enabled(timeout=30_000)
        with page.expect_download(timeout=60_000) as info:
            chosen.click()
        download = info.value
        data = open(download.path(), "rb").read()
        assert download.suggested_filename.endswith(f".{fmt}"), download.suggested_filename
        if fmt == "json":
            assert json.loads(data)["cover"]["customer_id"] == cid
        else:
            text = data.decode("utf-8")
            assert text.lstrip().lower().startswith("<!doctype html") and cid in text
        downloads.append((fmt, data))
        # the list of exports reads the new register row and the whole page again; the next format is chosen after
        expect(page.get_by_test_id("stDataFrame").get_by_text(hashlib.sha256(data).hexdigest()[:16])).to_have_count(
            1, timeout=30_000
        )
        wait_idle(page)
        screenshot(f"access_export_{n}_{fmt}")
    rows = db.fetch("SELECT format, sha256, customer_id FROM core_access_register WHERE id > %s ORDER BY id", (before,))
    assert [(r["format"], r["customer_id"]) for r in rows] == [("html", cid), ("json", cid), ("html", cid)]
    assert [r["sha256"] for r in rows] == [hashlib.sha256(d).hexdigest() for _, d in downloads]
    # the page's list of exports shows the three (it reads the register again once a download registered)
    grid = page.get_by_test_id("stDataFrame")
    for _, data in downloads:
        expect(grid.get_by_text(hashlib.sha256(data).hexdigest()[:16])).to_have_count(1, timeout=30_000)
    page.wait_for_timeout(500)  # let the table settle for the screenshot
    screenshot("access_export_three_listed")
