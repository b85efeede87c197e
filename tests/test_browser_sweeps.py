"""Real browser (Debian chromium + Playwright) on the Sweeps page of the demo database.

The demo database is shared by the session, so this test opens the manual sweep dialog but does not
run it (the AppTest in test_sweeps_page.py runs a manual sweep on its own database)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def test_sweeps_page_renders_its_charts_and_the_dialog(page, dashboard_url, demo_db, screenshot):
    # Through the dashboard's navigation, as an SRE would arrive.
    page.goto(dashboard_url)
    expect(page.get_by_test_id("stSidebarNav")).to_contain_text("Barridos", timeout=30_000)
    page.get_by_test_id("stSidebarNav").get_by_role("link", name="Barridos").click()
    expect(page.get_by_role("heading", name="Barridos de TTL y retención de checkpoints")).to_be_visible(timeout=30_000)
    assert "/sweeps" in page.url
    expect(page.locator(".js-plotly-plot")).to_have_count(3, timeout=15_000)
    expired = demo_db.fetch_one(
        "SELECT count(*) AS n FROM store WHERE prefix LIKE 'proveedores.%%' AND expires_at < now()"
    )["n"]
    assert expired > 0
    expect(page.get_by_test_id("stMetric").filter(has_text="Proveedores: caducados")).to_contain_text(str(expired))
    # The forecast has bars (plotly draws one path per bar) and the log lists the demo's run.
    expect(page.locator(".js-plotly-plot").nth(2).locator(".bars path").first).to_be_attached()
    expect(page.get_by_test_id("stDataFrame").last.get_by_text("demo").first).to_be_attached()
    screenshot("sweeps")
    page.get_by_text("Registro de barridos").scroll_into_view_if_needed()
    screenshot("sweeps-log")

    page.get_by_role("button", name="Barrer ahora").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Barrido manual", timeout=15_000)
    expect(dialog.get_by_role("button", name="Ejecutar barrido")).to_be_disabled()
    screenshot("sweeps-dialog")


def test_sre_prunes_after_seeing_the_dry_run_in_the_browser(page, create_database, screenshot):
    """Its own database and server (the demo's is shared): a dry run listing the threads it would prune, then the
    sweep with history pruning, and the log telling the dry run from the sweep."""
    import time

    from conftest import off_loop, start_streamlit, stop_streamlit
    from test_sweep import converse

    from core.db import Database
    from core.memory.embeddings import OfflineHashEmbeddings
    from core.memory.store import build_store, put_memory

    db = Database(create_database())
    store = build_store(db.pool, OfflineHashEmbeddings(64), 64)
    off_loop(converse, db, store)
    put_memory(store, ("proveedores", "P1"), "aviso-flash", {"texto": "flash"}, valid_for_minutes=0.005)
    time.sleep(0.4)
    before = db.fetch_one("SELECT count(*) AS n FROM checkpoints")["n"]
    proc, url = start_streamlit({"PG_AGENTES": db.dsn, "LOCAL_ROLES": "sre"})
    try:
        page.goto(f"{url}/sweeps")
        expect(page.get_by_role("heading", name="Barridos de TTL y retención de checkpoints")).to_be_visible(
            timeout=30_000
        )
        expect(page.get_by_test_id("stMetric").filter(has_text="Último barrido")).to_contain_text("nunca")
        page.get_by_role("button", name="Barrer ahora").click()
        dialog = page.get_by_role("dialog")
        expect(dialog.get_by_role("button", name="Ejecutar barrido")).to_be_disabled()
        dialog.get_by_text("Podar también el historial de los hilos vivos").click()
        for label, value in (
            ("Checkpoints que se conservan por hilo y espacio de nombres", "1"),
            ("Solo hilos sin actividad desde hace (minutos; 0 = todos)", "0"),
        ):
            box = dialog.get_by_label(label)
            box.fill(value)
            box.press("Enter")
        dialog.get_by_role("button", name="Simular (no borra nada)").click()
        expect(dialog).to_contain_text("se borrarían 1 documentos", timeout=30_000)
        dialog.get_by_text("Hilos podados (5)").click()
        expect(dialog.get_by_test_id("stDataFrame").get_by_text("cliente-C1-1").first).to_be_attached()
        screenshot("sweeps-prune-dry-run")
        assert db.fetch_one("SELECT count(*) AS n FROM checkpoints")["n"] == before
        dialog.get_by_text("Entiendo que el borrado es definitivo").click()
        dialog.get_by_role("button", name="Ejecutar barrido").click()
        expect(page.get_by_role("dialog")).to_have_count(0, timeout=30_000)
        run = db.fetch_one("SELECT * FROM core_sweep_log WHERE NOT dry_run")
        assert run["status"] == "ok" and run["prune_checkpoints"] > 0
        expect(page.get_by_test_id("stMetric").filter(has_text="Último barrido")).to_contain_text("Hecho")
        expect(page.get_by_text("No hay documentos caducados sin barrer.")).to_be_visible()
        page.get_by_text("Registro de barridos").scroll_into_view_if_needed()
        expect(page.get_by_test_id("stDataFrame").get_by_text("Simulación (nada borrado)").first).to_be_attached()
        screenshot("sweeps-after-prune")
    finally:
        stop_streamlit(proc)
        db.close()


def test_a_sweep_started_from_the_page_ends_after_the_browser_left(page, create_database, screenshot):
    """ "Barrer ahora", simulate, run, then leave the page while the run waits on an agent's transaction: the run goes
    on in the dashboard, Barridos renders during it (the run listed as running) and after it (done), and the run
    ends ok, never left 'running'. Its own database and server (the demo's is shared)."""
    import psycopg
    from apptools import wait_until
    from conftest import start_streamlit, stop_streamlit

    from core.db import Database
    from core.memory.embeddings import OfflineHashEmbeddings
    from core.memory.store import build_store, put_memory

    db = Database(create_database())
    store = build_store(db.pool, OfflineHashEmbeddings(64), 64)
    put_memory(store, ("proveedores", "P1"), "aviso-flash", {"texto": "flash"}, valid_for_minutes=0.001)
    wait_until(lambda: db.fetch_one("SELECT count(*) AS n FROM store WHERE expires_at < now()")["n"] == 1)
    proc, url = start_streamlit({"PG_AGENTES": db.dsn, "LOCAL_ROLES": "sre"})
    agent = psycopg.connect(db.dsn)
    try:
        page.goto(f"{url}/sweeps")
        heading = page.get_by_role("heading", name="Barridos de TTL y retención de checkpoints")
        expect(heading).to_be_visible(timeout=30_000)
        page.get_by_role("button", name="Barrer ahora").click()
        dialog = page.get_by_role("dialog")
        dialog.get_by_role("button", name="Simular (no borra nada)").click()
        expect(dialog).to_contain_text("se borrarían 1 documentos", timeout=30_000)
        dialog.get_by_text("Entiendo que el borrado es definitivo").click()
        # an agent's transaction holds the expired row: the run waits for it in its TTL step
        agent.execute("SELECT 1 FROM store WHERE expires_at < now() FOR UPDATE")
        dialog.get_by_role("button", name="Ejecutar barrido").click()
        expect(dialog).to_contain_text("Barrido de TTL", timeout=30_000)  # the run's row is written, its lock held

        page.goto(f"{url}/checkpoints")  # the browser leaves: its session ends
        expect(page.get_by_test_id("stMain")).to_be_visible(timeout=30_000)
        page.goto(f"{url}/sweeps")  # Barridos during the run
        expect(heading).to_be_visible(timeout=30_000)
        expect(page.get_by_test_id("stMetric").filter(has_text="Último barrido")).to_contain_text("En curso")
        expect(page.get_by_test_id("stException")).to_have_count(0)
        screenshot("sweeps-run-left-running")
        run = db.fetch_one("SELECT id, status FROM core_sweep_log WHERE NOT dry_run")
        assert run["status"] == "running"

        agent.rollback()  # the agent's transaction ends: the run goes on to its end, nobody watching it
        wait_until(
            lambda: (
                db.fetch_one("SELECT status FROM core_sweep_log WHERE id = %s", (run["id"],))["status"] != "running"
            ),
            60,
        )
        assert db.fetch_one("SELECT status, documents_deleted FROM core_sweep_log WHERE id = %s", (run["id"],)) == {
            "status": "ok",
            "documents_deleted": 1,
        }
        page.goto(f"{url}/sweeps")  # Barridos after the run
        expect(heading).to_be_visible(timeout=30_000)
        expect(page.get_by_test_id("stMetric").filter(has_text="Último barrido")).to_contain_text("Hecho")
        expect(page.get_by_text("No hay documentos caducados sin barrer.")).to_be_visible()
        expect(page.get_by_test_id("stException")).to_have_count(0)
        screenshot("sweeps-run-left-done")
    finally:
        agent.close()
        stop_streamlit(proc)
        db.close()
