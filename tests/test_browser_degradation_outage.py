"""Real browser during a FULL outage of the agents' PostgreSQL (embedded server stopped): the
Degradation page shows no green all-clear; the replica whose metrics endpoint is configured
(AGENT_METRICS_URLS) is shown degraded, read live from its endpoint; the one without an endpoint
is unknown (or silent once its heartbeat is overdue), with the age of the last reading. After the
restart and the resync both are ok again. Nothing is mocked."""

from __future__ import annotations

import psycopg
import pytest
from apptools import wait_until
from conftest import DIMS, dsn_for, free_port, own_embedded_server, start_streamlit, stop_streamlit
from playwright.sync_api import expect

from agent_memory_runtime import metrics
from agent_memory_runtime.dual_saver import DualCheckpointSaver
from core.db import Database
from core.history import replica_health
from core.migrate import migrate

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser_outage_server(tmp_path_factory):
    yield from own_embedded_server(tmp_path_factory, "degradation-browser-outage")


def _metric_value(page, label: str):
    return page.get_by_test_id("stMetric").filter(has_text=label).get_by_test_id("stMetricValue")


def test_full_outage_no_all_clear_replicas_degraded_or_unknown(page, browser_outage_server, screenshot):
    base, control = browser_outage_server
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute('CREATE DATABASE "degr_browser_outage"')
    dsn = dsn_for(base, "degr_browser_outage")
    migrate(dsn, DIMS)
    db = Database(dsn)
    with_endpoint = DualCheckpointSaver(dsn, heartbeat_interval=0.5, replica_id="agentes-endpoint")
    tables_only = DualCheckpointSaver(dsn, heartbeat_interval=0.5, replica_id="agentes-sin-endpoint")
    port = free_port()
    assert metrics.start_metrics_server(with_endpoint, port, addr="127.0.0.1")
    proc = None
    try:
        wait_until(lambda: len(replica_health.replicas(db)) == 2, 20)
        proc, url = start_streamlit({"PG_AGENTES": dsn, "AGENT_METRICS_URLS": f"http://127.0.0.1:{port}/metrics"})
        page.set_viewport_size({"width": 1900, "height": 1400})  # glide draws only the columns in view
        page.goto(f"{url}/degradation")
        expect(page.get_by_role("heading", name="Persistencia degradada de las réplicas")).to_be_visible(timeout=30_000)
        expect(page.get_by_text("Todas las réplicas persisten en PostgreSQL.")).to_be_visible(timeout=20_000)

        control.stop()  # the full outage
        try:
            assert with_endpoint.wait_for("degraded", 15) and tables_only.wait_for("degraded", 15)
            expect(page.get_by_text("La base de datos no responde")).to_be_visible(timeout=30_000)
            expect(_metric_value(page, "Degradadas")).to_have_text("1", timeout=30_000)
            grid = page.get_by_test_id("stDataFrame").filter(has_text="agentes-endpoint").first
            expect(grid.get_by_text("degradada", exact=True)).to_be_attached(timeout=15_000)
            expect(grid.get_by_text("endpoint de métricas", exact=True).first).to_be_attached()
            unknown_or_silent = grid.get_by_text("desconocido", exact=True).or_(
                grid.get_by_text("silenciosa", exact=True)
            )
            expect(unknown_or_silent.first).to_be_attached()
            expect(grid.get_by_text("ok", exact=True)).to_have_count(0)
            expect(page.get_by_text("Todas las réplicas persisten en PostgreSQL.")).to_have_count(0)
            expect(page.get_by_test_id("stException")).to_have_count(0)
            shot = screenshot("degradation_full_outage")
            assert shot.stat().st_size > 10_000
        finally:
            control.start()
        assert with_endpoint.wait_for("healthy", 30) and tables_only.wait_for("healthy", 30)
        expect(page.get_by_text("Todas las réplicas persisten en PostgreSQL.")).to_be_visible(timeout=40_000)
        expect(_metric_value(page, "Degradadas")).to_have_text("0")
    finally:
        if proc is not None:
            stop_streamlit(proc)
        metrics.unregister(with_endpoint)
        with_endpoint.close()
        tables_only.close()
        db.close()
