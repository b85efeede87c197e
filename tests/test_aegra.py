"""Agents served by Aegra (issue 53): a real `aegra-api` server on the embedded PostgreSQL, driven by the LangGraph SDK
(tests/aegra_deployment.py), and what the dashboard reads, erases and exports there."""

from __future__ import annotations

import contextlib

import psycopg
import pytest
from aegra_deployment import C9_WORDS, AegraDeployment, deploy
from aegra_server import AEGRA_VERSION
from conftest import DIMS, free_port

from core.migrate import migrate

pytestmark = pytest.mark.slow

AEGRA_TABLES = {"assistant", "assistant_versions", "thread", "runs", "run_events", "alembic_version"}


def _deployment(create_database, tmp_path_factory) -> AegraDeployment:
    dsn = create_database(migrated=False, prefix="aegra")
    deployment = deploy(dsn, tmp_path_factory.mktemp("aegra"), free_port())
    migrate(dsn, DIMS)  # the dashboard's migrations, applied after the agents' server made its tables
    return deployment


@pytest.fixture(scope="module")
def aegra(create_database, tmp_path_factory):
    """One Aegra deployment for the module's reading tests (read-only by convention)."""
    deployment = _deployment(create_database, tmp_path_factory)
    yield deployment
    deployment.server.stop()


def test_aegra_serves_the_graphs_through_the_sdk(aegra):
    """Aegra made its own tables with its own migrations, and the SDK reads back what it ran: statuses of a plain
    run, an interrupt and its resume, a failed run, a cancelled one and one a killed server left running."""
    with psycopg.connect(aegra.dsn) as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        revision = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    assert tables >= AEGRA_TABLES
    assert revision == ("d042a0ca1cb5",)  # aegra-api 0.6.0's head migration
    assert AEGRA_VERSION == "0.6.0"
    client = aegra.client()
    statuses = {label: [r["status"] for r in client.runs.list(t)] for label, t in aegra.threads.items()}
    assert statuses == {
        "c9_retail": ["success"],
        "c9_articulo": ["success"],
        "c9_revision": ["success", "interrupted"],  # newest first: the resume, then the interrupted run
        "c9_fallido": ["error"],
        "c10_articulo": ["success"],
        "c10_cancelado": ["interrupted"],
        "c10_colgado": ["running"],  # its server was killed: nobody will ever finish it
    }
    thread_status = {label: client.threads.get(t)["status"] for label, t in aegra.threads.items()}
    assert thread_status["c9_fallido"] == "error"
    assert thread_status["c10_colgado"] == "busy"
    failed = client.runs.get(aegra.threads["c9_fallido"], aegra.runs["c9_fallido"][0])
    assert "tienda" in str(failed.get("error") or failed.get("error_message") or failed)
    state = client.threads.get_state(aegra.threads["c9_retail"])
    assert any(C9_WORDS[0] in str(m.get("content")) for m in state["values"]["messages"])
    # the retail agent saved the customer's preference in the store Aegra gave it
    items = client.store.search_items(("clientes", "C9"))["items"]
    assert {i["key"] for i in items} >= {"pref-recogida", "pref-contacto"}
    with contextlib.closing(psycopg.connect(aegra.dsn)) as conn:
        no_checkpoint = conn.execute(
            "SELECT count(*) FROM checkpoints WHERE thread_id = %s", (aegra.threads["c9_fallido"],)
        ).fetchone()
    assert no_checkpoint == (0,)
