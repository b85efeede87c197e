"""Real browser (Debian chromium) on a deployment served by a real Aegra (tests/aegra_deployment.py): the Degradation
page names the server, the Checkpoints page's agent-server view flags the run a killed server process left running
and the threads whose server row and checkpoints disagree, and a DPO's erasure shows the zero-count queries over
Aegra's tables beside the store's two; then the SDK no longer serves the customer's threads."""

from __future__ import annotations

import re

import httpx
import psycopg
import pytest
from aegra_deployment import deploy
from conftest import DIMS, free_port, start_streamlit, stop_streamlit
from playwright.sync_api import expect
from test_browser_all_pages import PAGES

from bench.st_server import walk_pages
from core.migrate import migrate

pytestmark = pytest.mark.browser

STUCK_S = "2"


@pytest.fixture(scope="module")
def aegra_site(create_database, tmp_path_factory):
    dsn = create_database(migrated=False, prefix="aegrab")
    deployment = deploy(dsn, tmp_path_factory.mktemp("aegra"), free_port())
    try:
        migrate(dsn, DIMS)
        proc, url = start_streamlit({"PG_AGENTES": dsn, "AGENT_SERVER_STUCK_RUN_S": STUCK_S})
        try:
            yield deployment, url
        finally:
            stop_streamlit(proc)
    finally:
        deployment.server.stop()


def _wait_stuck(dsn: str, run_id: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_sleep(GREATEST(0, %s - extract(epoch FROM now() - updated_at))) FROM runs WHERE run_id = %s",
            (float(STUCK_S) + 0.5, run_id),
        )


def test_degradation_names_the_agent_server(page, aegra_site, screenshot):
    _, url = aegra_site
    page.goto(f"{url}/degradation")
    expect(page.get_by_text(re.compile(r"Servidor de agentes: Aegra, migración d042a0ca1cb5"))).to_be_visible(
        timeout=30_000
    )
    expect(page.get_by_text("(la de aegra-api 0.6.0)", exact=False)).to_be_visible()
    expect(page.get_by_text("El seguidor de cambios ha aplicado todas las filas")).to_be_visible(timeout=30_000)
    page.wait_for_timeout(1500)  # the live tiles' first reading
    screenshot("aegra_degradation")


def test_checkpoints_flags_the_run_a_killed_server_left_running(page, aegra_site, screenshot):
    deployment, url = aegra_site
    killed = deployment.runs["c10_colgado"][0]
    _wait_stuck(deployment.dsn, killed)
    page.set_viewport_size({"width": 1600, "height": 1400})
    page.goto(f"{url}/checkpoints?view=server")
    expect(page.get_by_role("heading", name="Servidor de agentes: hilos y ejecuciones")).to_be_visible(timeout=30_000)
    alert = page.get_by_test_id("stAlert").filter(has_text="1 ejecuciones llevan más de 2 s")
    expect(alert).to_be_visible(timeout=30_000)
    grids = page.get_by_test_id("stDataFrame")
    expect(grids.first.get_by_text(killed[:8], exact=False)).to_have_count(1)
    expect(page.get_by_text("hilos no coinciden", exact=False)).to_be_visible()
    screenshot("aegra_checkpoints_server")
    expect(grids.nth(1).get_by_text("solo en el servidor")).to_have_count(1)


def button(page, text: str):
    return page.get_by_test_id("stButton").filter(has_text=text).locator("button")


def test_every_page_reads_a_database_served_by_aegra_in_both_languages(page, aegra_site, screenshot):
    """Issue 53: every page of the dashboard on the database a real Aegra wrote (its tables beside the agents'), in
    Spanish and English: no page fails, each shows its heading, and its screenshot is kept (looked at by a person).
    Before the erasure below: C10's thread and C10 are shown, C9 is erased last."""
    deployment, url = aegra_site
    paths = {
        name: path.format(thread=deployment.threads["c10_cancelado"], customer="C10")
        for name, (path, _, _) in PAGES.items()
    }
    for lang in ("es", "en"):
        for name in walk_pages(page, url, paths, lang, timeout_ms=60_000):
            page.wait_for_load_state("networkidle")
            expect(page.get_by_test_id("stException")).to_have_count(0)
            screenshot(f"aegra_page-{name}-{lang}")


def test_dpo_erasure_shows_aegra_tables_at_zero_and_the_sdk_forgets_the_threads(page, aegra_site, screenshot):
    deployment, url = aegra_site
    page.set_viewport_size({"width": 1400, "height": 2400})
    page.goto(f"{url}/erasure")
    expect(page.get_by_text("Borrar todo lo que los agentes recuerdan de un cliente")).to_be_visible(timeout=30_000)
    field = page.get_by_label("Id del cliente (p. ej. C9)")
    field.fill("C9")
    field.press("Enter")
    button(page, "Vista previa").click()
    expect(page.get_by_text("Qué se borraría de clientes.C9")).to_be_visible(timeout=30_000)
    # the failed run's thread never had a checkpoint: said as kept by the server, counted and erased, never as a
    # thread "erased or expired" that is "not counted"
    expect(page.get_by_text(re.compile(r"^1 hilos no tienen checkpoints pero el servidor de agentes"))).to_be_visible()
    expect(page.get_by_text(re.compile("ya no tienen checkpoints"))).to_have_count(0)
    # the screenshot shows the counts (the agent server's among the first rows) and the threads, not placeholders
    grids = page.get_by_test_id("stDataFrame")
    for cell in ("aegra.runs", "aegra.thread", "clientes.C9", deployment.threads["c9_retail"]):
        expect(grids.get_by_text(cell, exact=True)).to_have_count(1, timeout=30_000)
    page.wait_for_timeout(800)
    screenshot("aegra_erasure_preview")
    button(page, "Borrar…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_text("Confirmar el borrado")).to_be_visible(timeout=10_000)
    dialog.get_by_label("Repita el id del cliente").fill("C9")
    dialog.get_by_label("Repita el id del cliente").press("Enter")
    dialog.get_by_test_id("stButton").filter(has_text="Borrar definitivamente").locator("button").click()
    expect(page.get_by_text("Borrado completo de C9")).to_be_visible(timeout=60_000)
    codes = page.get_by_test_id("stCode").filter(visible=True)
    for table in ("run_events", "runs", "thread"):
        expect(codes.filter(has_text=f'SELECT count(*) AS n FROM "{table}" WHERE')).to_have_count(1)
    expect(
        page.get_by_role("heading", name=re.compile("las dos del almacén y las del servidor de agentes"))
    ).to_be_visible()
    results = page.get_by_text(re.compile(r"^Resultado: 0 · ejecutada el")).filter(visible=True)
    expect(results).to_have_count(5)  # store, store_vectors and Aegra's three
    page.wait_for_timeout(500)
    screenshot("aegra_erasure_complete")
    client = deployment.client()
    for thread_id in deployment.threads_of("C9"):
        with pytest.raises(httpx.HTTPStatusError) as gone:
            client.threads.get(thread_id)
        assert gone.value.response.status_code == 404
    assert {t["thread_id"] for t in client.threads.search(limit=100)} == set(deployment.threads_of("C10"))
