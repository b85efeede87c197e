"""Real browser on a real Streamlit server, and the real exporter's /metrics over HTTP: a row the change follower
cannot apply (a customer's document whose `hilo` is longer than a btree entry of our shadow's link index admits,
written by a stock PostgresStore) is a dead letter on the Degradation page and `agent_memory_capture_dead_letters 1`
in /metrics, while the follower applied every other write."""

from __future__ import annotations

import urllib.request

import psycopg
import pytest
from conftest import free_port, start_streamlit, stop_streamlit
from langgraph.store.postgres import PostgresStore
from playwright.sync_api import expect
from prometheus_client import start_http_server
from test_capture_dead_letters import noise

from core.capture.follower import catch_up, drop_slot
from core.operations.exporter import make_registry

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def dead_letter_dashboard(create_database):
    dsn = create_database(migrated=True, prefix="capture_dl_browser")
    catch_up(dsn)  # creates the slot
    with PostgresStore.from_conn_string(dsn) as store:
        store.put(("clientes", "D1"), "antes", {"texto": "antes", "hilo": "cliente-D1-1"})
        store.put(("clientes", "D1"), "veneno", {"texto": "no cabe", "hilo": noise(3_000, 3)})
        store.put(("clientes", "D2"), "despues", {"texto": "después", "hilo": "cliente-D2-1"})
    catch_up(dsn, 20)
    port = free_port()
    exporter, thread = start_http_server(port, addr="127.0.0.1", registry=make_registry(dsn))
    proc, url = start_streamlit({"PG_AGENTES": dsn})
    yield dsn, url, f"http://127.0.0.1:{port}/metrics"
    stop_streamlit(proc)
    exporter.shutdown()
    thread.join(10)
    drop_slot(dsn)


def test_a_dead_letter_on_the_degradation_page_and_in_metrics(page, dead_letter_dashboard, screenshot):
    dsn, url, metrics_url = dead_letter_dashboard
    with psycopg.connect(dsn) as conn:  # everything else applied
        counts = dict(conn.execute("SELECT prefix, documents FROM core_prefix_counts").fetchall())
    assert counts == {"clientes.D1": 1, "clientes.D2": 1}

    with urllib.request.urlopen(metrics_url, timeout=30) as response:
        metrics = response.read().decode()
    assert "\nagent_memory_capture_dead_letters 1.0\n" in metrics

    page.goto(f"{url}/degradation")
    expect(page.get_by_role("heading", name="Persistencia degradada de las réplicas")).to_be_visible(timeout=30_000)
    heading = page.get_by_role("heading", name="Filas que el seguidor de cambios no pudo aplicar")
    expect(heading).to_be_visible(timeout=20_000)
    expect(page.get_by_text("1 fila(s) sin aplicar: sus cifras son desconocidas hasta un recuento.")).to_be_visible()
    grid = page.get_by_test_id("stDataFrame").filter(has_text="clientes.D1 / veneno")
    expect(grid).to_have_count(1)
    expect(
        grid.get_by_text("documentos por prefijo: clientes.D1", exact=False)
    ).to_be_attached()  # unknown until a recount
    with psycopg.connect(dsn) as conn:  # the error the page's row holds (off to the right of the grid's view)
        (error,) = conn.execute("SELECT error FROM core_capture_dead_letters").fetchone()
    assert error.startswith("ProgramLimitExceeded: index row size")
    heading.scroll_into_view_if_needed()
    screenshot("degradation-capture-dead-letter")
