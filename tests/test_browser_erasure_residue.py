"""Real browser (Debian chromium): on a database written by the memory article's agents (no metadata, `conv-<uuid>`
threads), the DPO sees the coverage notice, the threads found by the `hilo` links, and the residue threads with
their snippets; decides each one (erase / leave with a reason) and gets a complete erasure with a named exclusion."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from core.db import Database, reset_pool
from tests.conftest import start_streamlit, stop_streamlit
from tests.test_browser_erasure import button

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def foreign(create_database):
    from foreign_agents import write_article_agents

    from core.migrate import migrate
    from tests.conftest import DIMS

    dsn = create_database(migrated=False, prefix="foreignb")
    written = write_article_agents(dsn)
    migrate(dsn, DIMS)
    yield written
    reset_pool(dsn)


@pytest.fixture(scope="module")
def server(foreign):
    proc, url = start_streamlit({"PG_AGENTES": foreign.dsn})  # every role: Erasure is not the default page
    yield url
    stop_streamlit(proc)


def test_dpo_decides_each_residue_thread_in_the_browser(page, server, foreign, screenshot):
    db = Database(foreign.dsn)
    (read,) = foreign.threads_of("C9", "read")
    (chat,) = foreign.threads_of("C9", "chat")
    page.goto(f"{server}/erasure?cliente=C9")
    # the first page view migrates nothing but may catch up the tool-call extraction: generous on a loaded machine
    expect(page.get_by_text("Borrar todo lo que los agentes recuerdan de un cliente")).to_be_visible(timeout=120_000)
    expect(page.get_by_text(re.compile(r"Cobertura de atribución: 12 / 30 de los hilos \(40\s%\)"))).to_be_visible()
    field = page.get_by_label("Id del cliente (p. ej. C9)")
    if field.input_value() != "C9":
        field.fill("C9")
        field.press("Enter")
    button(page, "Vista previa").click()
    expect(page.get_by_text("Hilos residuales: sin atribuir, pero contienen datos del cliente")).to_be_visible(
        timeout=30_000
    )
    boxes = page.get_by_test_id("stVerticalBlock")  # the innermost block holding a thread id is its bordered box
    chat_box, read_box = boxes.filter(has_text=chat).last, boxes.filter(has_text=read).last
    expect(chat_box).to_be_visible()
    expect(read_box).to_be_visible()
    expect(page.get_by_text(re.compile("Falta decidir 2 hilo"))).to_be_visible()
    expect(button(page, "Borrar…")).to_be_disabled()
    expect(chat_box.get_by_text("Borrar", exact=True)).to_be_visible()
    expect(chat_box.get_by_test_id("stDataFrame").get_by_text("C9", exact=True)).to_have_count(1)
    page.wait_for_timeout(1000)  # let the canvas-drawn tables paint for the screenshot
    screenshot("erasure_residue_preview")
    chat_box.scroll_into_view_if_needed()
    page.wait_for_timeout(500)
    screenshot("erasure_residue_threads")

    chat_box.get_by_text("Borrar", exact=True).click()
    read_box.get_by_text("Dejar (con motivo)", exact=True).click()
    expect(page.get_by_text(re.compile("Falta decidir 1 hilo"))).to_be_visible(timeout=10_000)
    # the page's answer to the second click (a run that redraws the reason field: typing before it arrives is lost)
    expect(read_box.get_by_text("Escriba el motivo para dejarlo")).to_be_visible(timeout=10_000)
    reason = read_box.get_by_label("Motivo para dejarlo")
    reason.fill("retención legal: reclamación 42")
    reason.press("Enter")
    expect(button(page, "Borrar…")).to_be_enabled(timeout=10_000)
    button(page, "Borrar…").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Repita el id del cliente").fill("C9")
    dialog.get_by_label("Repita el id del cliente").press("Enter")
    dialog.get_by_test_id("stButton").filter(has_text="Borrar definitivamente").locator("button").click()
    expect(page.get_by_text(re.compile("Completo con exclusiones nombradas"))).to_be_visible(timeout=60_000)
    expect(page.get_by_text(re.compile("reclamación 42")).first).to_be_visible()
    page.wait_for_timeout(500)
    screenshot("erasure_residue_complete_with_exclusion")

    row = db.fetch_one("SELECT * FROM core_erasure_register")
    assert row["status"] == "complete" and [e["thread_id"] for e in row["exclusions"]] == [read]
    left = db.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE thread_id = %s", (read,))["n"]
    gone = db.fetch_one(
        "SELECT count(*) AS n FROM checkpoints WHERE thread_id = ANY(%s)", ([chat] + foreign.threads_of("C9", "write"),)
    )["n"]
    assert left > 0 and gone == 0
    db.close()
