"""Real browser (Debian chromium): in the Registro de borrados, a request whose re-check found data is shown as such
(not as plain complete), first, with a banner, and "Borrar de nuevo" runs a new request linked to it (issue 25,
point 5). "Verificar la cadena" still verifies after the erasures and re-checks."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from core.agents.retail import ContextoCliente, run_turn
from core.db import Database, reset_pool
from core.privacy import erasure, erasure_register
from tests.conftest import off_loop, start_streamlit, stop_streamlit
from tests.test_browser_erasure import button
from tests.test_erasure import agents_for, converse, make_store, write_docs

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def came_back(create_database):
    """C9 erased, then a late turn recreates one of its threads; C90 erased after it, clean."""
    db = Database(create_database(prefix="databack"))

    def write() -> None:
        store = make_store(db)
        agent = agents_for(db, store)
        for customer in ("C9", "C90"):
            write_docs(store, customer, 5)
            converse(agent, customer)
        db.first = erasure.erase(db, "C9", operator="dpo@example.com").request_id
        db.later = erasure.erase(db, "C90", operator="dpo@example.com").request_id
        run_turn(agent, ContextoCliente("C9"), "cliente-C9-1", "Prefiero que me atendáis en gallego.")
        assert [r.clean for r in erasure_register.recheck_all(db)] == [False, True]

    off_loop(write)
    yield db
    reset_pool(db.dsn)


@pytest.fixture(scope="module")
def server(came_back):
    proc, url = start_streamlit({"PG_AGENTES": came_back.dsn})
    yield url
    stop_streamlit(proc)


def test_data_back_is_first_and_erased_again_in_the_browser(page, server, came_back, screenshot):
    db = came_back
    page.goto(server)
    nav = page.get_by_test_id("stSidebarNav")
    nav.get_by_role("link", name=re.compile("Registro de borrados")).click()
    expect(page.get_by_role("heading", name="Registro de borrados")).to_be_visible(timeout=30_000)
    banner = page.get_by_text(f"1 solicitud con datos reaparecidos (al principio de la tabla): #{db.first}")
    expect(banner).to_be_visible(timeout=20_000)
    expect(page.get_by_test_id("stMetric").filter(has_text="Con datos reaparecidos")).to_contain_text("1")
    grid = page.get_by_test_id("stDataFrame").first
    expect(grid.get_by_text("datos reaparecidos", exact=True)).to_have_count(1)
    expect(grid.get_by_text("completa", exact=True)).to_have_count(1)
    expect(page.get_by_text(f"La última re-comprobación de la solicitud n.º {db.first} encontró datos")).to_be_visible()
    # what came back, named (issue 51 item 4): the recreated thread, when and by which agent
    expect(
        page.get_by_text(re.compile(r"^Lo que existe de nuevo, leído ahora: \d+ hilos? o documentos?\.$"))
    ).to_be_visible()
    back = page.get_by_test_id("stDataFrame").nth(1)
    expect(back.get_by_text("hilo borrado, recreado", exact=True)).to_have_count(1)
    expect(back.get_by_text("cliente-C9-1", exact=True)).to_have_count(1)
    page.wait_for_timeout(500)
    screenshot("erasure_register_data_back")  # the row on top is the one that came back (order: AppTest)

    button(page, "Borrar de nuevo").click()
    expect(
        page.get_by_text(
            re.compile(
                rf"Solicitud n\.º {db.first}: borrado de nuevo como solicitud n\.º \d+: "
                r"completa"
            )
        )
    ).to_be_visible(timeout=60_000)
    again = db.fetch_one("SELECT * FROM core_erasure_register ORDER BY id DESC LIMIT 1")
    assert again["customer_id"] == "C9" and again["status"] == "complete"
    assert (
        db.fetch_one("SELECT resumed_by FROM core_erasure_register WHERE id = %s", (db.first,))["resumed_by"]
        == again["id"]
    )
    assert db.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE thread_id = 'cliente-C9-1'")["n"] == 0
    expect(page.get_by_test_id("stMetric").filter(has_text="Con datos reaparecidos")).to_contain_text("0")
    expect(banner).to_have_count(0)
    expect(grid.get_by_text("datos reaparecidos · borrados de nuevo", exact=True)).to_have_count(1)
    expect(button(page, "Borrar de nuevo")).to_have_count(0)

    button(page, "Verificar la cadena de hashes").first.click()
    expect(page.get_by_text(re.compile(r"^Cadena íntegra: \d+ filas selladas"))).to_be_visible(timeout=20_000)
    page.wait_for_timeout(500)
    screenshot("erasure_register_erased_again")
