"""Agents served by Aegra (issue 53): a real `aegra-api` server on the embedded PostgreSQL, driven by the LangGraph SDK
(tests/aegra_deployment.py), and what the dashboard reads, erases and exports there."""

from __future__ import annotations

import contextlib
import time

import httpx
import psycopg
import pytest
from aegra_deployment import C9_WORDS, AegraDeployment, deploy, message
from aegra_server import AEGRA_VERSION
from apptools import frame, plain
from conftest import DIMS, free_port
from psycopg.rows import dict_row
from streamlit.testing.v1 import AppTest

from core.agent_server import aegra as aegra_tables
from core.db import Database
from core.migrate import migrate
from core.operations import exporter
from core.privacy import access, access_notice, access_render, erasure, evidence
from ui.safe import md

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


# --- detection --------------------------------------------------------------------------------------------------


def test_the_dashboard_recognizes_aegra_by_its_migrations(aegra):
    server = aegra_tables.detect(Database(aegra.dsn))
    assert server == aegra_tables.AgentServer("Aegra", "d042a0ca1cb5", "0.6.0", True, True, True)


def test_no_agent_server_where_its_tables_are_absent(db, article_agents_db):
    assert aegra_tables.detect(db) is None
    assert aegra_tables.detect(Database(article_agents_db.dsn)) is None
    with db.connection() as conn:  # an alembic version table of another application is not Aegra
        conn.execute("CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)")
        conn.execute("INSERT INTO alembic_version VALUES ('d042a0ca1cb5')")
    assert aegra_tables.detect(db) is None
    assert exporter.agent_server_metrics(psycopg.connect(db.dsn, row_factory=dict_row)) == []


# --- Checkpoints page reads, stuck runs, metrics ----------------------------------------------------------------


def _wait_older_than(aegra, run_id: str, seconds: float) -> None:
    with psycopg.connect(aegra.dsn) as conn:
        while conn.execute(
            "SELECT updated_at > now() - make_interval(secs => %s) FROM runs WHERE run_id = %s", (seconds, run_id)
        ).fetchone()[0]:
            time.sleep(0.2)


def test_threads_show_server_status_runs_and_disagreement(aegra):
    db = Database(aegra.dsn)
    threads = aegra_tables.server_threads(db, stuck_s=3600).set_index("thread_id")
    t = aegra.threads
    assert threads.loc[t["c9_fallido"], "server_status"] == "error"
    assert threads.loc[t["c9_fallido"], "agreement"] == "server_only"  # a failed first run: no checkpoint
    assert threads.loc[t["c9_retail"], "agreement"] == "both"
    assert threads.loc[t["c9_revision"], "runs"] == 2
    assert threads.loc[t["c9_retail"], "assistant"] == "retail"
    assert threads.loc[t["c10_colgado"], "stuck_runs"] == 0  # an hour's threshold: not stuck yet
    runs = aegra_tables.thread_runs(db, t["c9_fallido"], stuck_s=3600)
    assert list(runs["status"]) == ["error"] and "tienda" in runs.loc[0, "error_message"]
    # searchable and filterable like the rest, bad input changing nothing
    assert set(aegra_tables.server_threads(db, stuck_s=3600, statuses=["error"])["thread_id"]) == {t["c9_fallido"]}
    only = aegra_tables.server_threads(db, stuck_s=3600, agreement="server_only")
    assert set(only["thread_id"]) == {t["c9_fallido"]}
    found = aegra_tables.server_threads(db, stuck_s=3600, search=t["c9_retail"][:8].upper())
    assert t["c9_retail"] in set(found["thread_id"])
    for hostile in ("%", "%_%", "'", "c9' OR '1'='1"):  # plain text, never a pattern or SQL
        assert aegra_tables.server_threads(db, stuck_s=3600, search=hostile).empty
    for bad in ("\x00", "x" * 10_000):
        with pytest.raises(ValueError, match="plain text"):
            aegra_tables.server_threads(db, stuck_s=3600, search=bad)
    with pytest.raises(ValueError, match="agreement"):
        aegra_tables.server_threads(db, stuck_s=3600, agreement="x'; DROP TABLE runs; --")


def test_a_run_left_running_by_a_killed_server_is_flagged_and_measured(aegra):
    db = Database(aegra.dsn)
    killed = aegra.runs["c10_colgado"][0]
    _wait_older_than(aegra, killed, 2)
    stuck = aegra_tables.stuck_runs(db, stuck_s=2)
    assert list(stuck["run_id"]) == [killed]
    threads = aegra_tables.server_threads(db, stuck_s=2, stuck_only=True)
    assert list(threads["thread_id"]) == [aegra.threads["c10_colgado"]]
    with psycopg.connect(aegra.dsn, row_factory=dict_row) as conn:
        metrics = {
            (m.name, s.labels.get("status")): s.value
            for m in exporter.database_metrics(conn, stuck_s=2)
            for s in m.samples
        }
    assert metrics[("agent_memory_agent_server_stuck_runs", "running")] == 1
    assert metrics[("agent_memory_agent_server_stuck_runs", "pending")] == 0
    assert metrics[("agent_memory_agent_server_runs", "error")] == 1
    assert metrics[("agent_memory_agent_server_stuck_threshold_seconds", None)] == 2


def test_the_stuck_threshold_setting(monkeypatch):
    monkeypatch.delenv("AGENT_SERVER_STUCK_RUN_S", raising=False)
    assert aegra_tables.stuck_threshold_s() == aegra_tables.DEFAULT_STUCK_RUN_S
    monkeypatch.setenv("AGENT_SERVER_STUCK_RUN_S", "90")
    assert aegra_tables.stuck_threshold_s() == 90
    for bad in ("0", "-5", "ten", "inf", "nan"):
        monkeypatch.setenv("AGENT_SERVER_STUCK_RUN_S", bad)
        with pytest.raises(ValueError, match="AGENT_SERVER_STUCK_RUN_S"):
            aegra_tables.stuck_threshold_s()
        # the exporter refuses to start with it, rather than failing every scrape
        with pytest.raises(ValueError, match="AGENT_SERVER_STUCK_RUN_S"):
            exporter.DatabaseCollector("postgresql:///unused")


# --- access and erasure -----------------------------------------------------------------------------------------


def test_the_access_export_includes_what_the_customer_sent_through_aegra(aegra):
    report = access.gather(Database(aegra.dsn), "C9")
    runs = report.logs["agent_server_runs"]
    assert {r["thread_id"] for r in runs} == set(aegra.threads_of("C9"))
    said = "\n".join(r["said"] for r in runs)
    for words in (C9_WORDS[0], C9_WORDS[2], C9_WORDS[3]):
        assert words in said  # the failed run's input too: its thread has no checkpoint at all
    assert not any(w in said for w in ("T003", "espera"))  # C10's words are not C9's
    assert report.counts["agent_server_runs"] == len(runs)
    html = access_render.export_html(
        report, requested_by="dpo", lang="es", notice=access_notice.notice(Database(aegra.dsn), "es")
    )
    assert f"Hola, mi pedido {C9_WORDS[3]} no llega".encode() in html


def test_an_erasure_empties_aegra_tables_and_the_sdk_no_longer_serves_the_threads(create_database, tmp_path_factory):
    deployment = _deployment(create_database, tmp_path_factory)
    try:
        db = Database(deployment.dsn)
        c9, c10 = deployment.threads_of("C9"), deployment.threads_of("C10")
        assert set(c9) <= set(evidence.find_threads(db, "C9"))  # the failed run's thread by Aegra's rows alone
        result = erasure.erase(db, "C9", operator="dpo@example.com")
        assert result.complete, result.report
        shown = {e.table: e for e in result.server_evidence}
        assert set(shown) == {"aegra.run_events", "aegra.runs", "aegra.thread"}
        assert all(e.result == 0 for e in shown.values())
        assert 'FROM "runs" WHERE' in shown["aegra.runs"].sql and "'C9'" in shown["aegra.runs"].sql
        assert result.counts_before["aegra.runs"] == 5 and result.counts_before["aegra.thread"] == 4
        assert result.deleted["aegra.runs"] == 5 and result.deleted["aegra.thread"] == 4
        assert result.deleted["aegra.run_events"] > 0
        with psycopg.connect(deployment.dsn) as conn:
            for table, column in (
                ("runs", "input"),
                ("runs", "output"),
                ("thread", "metadata_json"),
                ("run_events", "data"),
            ):
                for words in C9_WORDS:
                    n = conn.execute(f"SELECT count(*) FROM {table} WHERE {column}::text LIKE %s", (f"%{words}%",))
                    assert n.fetchone() == (0,), (table, column, words)
            assert conn.execute("SELECT count(*) FROM thread WHERE thread_id = ANY(%s)", (c10,)).fetchone() == (3,)
        client = deployment.client()
        for thread_id in c9:
            with pytest.raises(httpx.HTTPStatusError) as gone:
                client.threads.get(thread_id)
            assert gone.value.response.status_code == 404
            assert client.runs.list(thread_id) == []
        listed = {t["thread_id"] for t in client.threads.search(limit=100)}
        assert listed == set(c10)
        assert client.threads.get(c10[0])["thread_id"] == c10[0]  # C10 is still served
    finally:
        deployment.server.stop()


def test_the_residue_reads_aegra_rows_nobody_attributed_and_events_are_counted_by_their_own_run_ids(
    create_database, tmp_path_factory
):
    """What no attribution rule reaches, planted through the SDK: a thread whose metadata names C9 in free text, and a
    run on a thread of C10's that fails before any checkpoint with C9's phone (a value of C9's documents) in its input.
    The residue proposes both; erased, the SDK no longer serves them. A thread of C9's deleted through the SDK keeps
    its run events (no foreign key): counted by the run ids captured before, and found by the proof's re-read, which
    withholds `complete`."""
    deployment = _deployment(create_database, tmp_path_factory)
    try:
        db, client = Database(deployment.dsn), deployment.client()
        note = client.threads.create(metadata={"nota": "Llamada del cliente C9 por su pedido"})["thread_id"]
        failed = client.threads.create()["thread_id"]
        words = "Aviso de tienda: contactar por teléfono 600111222 por la devolución"
        client.runs.wait(failed, "articulo", input=message(words), context={"cliente_id": "C10"})  # no tienda: fails
        assert [r["status"] for r in client.runs.list(failed)] == ["error"]
        preview = evidence.preview(db, "C9")
        assert {note, failed} <= set(preview.residue_threads)
        assert not {note, failed} & set(preview.thread_ids)  # no attribution source gave them
        snippets = {m.thread_id: m.snippet for m in preview.residue.matches}
        assert "600111222" in snippets[failed] and "C9" in snippets[note]
        # C10's runs name its store, T002, in their context: a routing key (CUSTOMER_STORE_KEYS), never read as
        # C9's value (C9's pickup preference is T002)
        assert set(preview.residue_threads) == {note, failed}
        decisions = {note: "erase", failed: "erase"}
        # the residue's zero-count query reads the server's rows too: the two threads count until left (or erased)
        with psycopg.connect(deployment.dsn, row_factory=dict_row) as conn:

            def residue_count(left: list[str]) -> int:
                found = evidence.run_evidence_conn(conn, [], "C9", [], residue_terms=preview.residue.terms, left=left)
                return {e.table: e.result for e in found}["residue"]

            assert residue_count([]) - residue_count([note, failed]) == 2
        # C9's reviewed thread deleted through the server's API: its runs go (cascade), their events stay
        revision = deployment.threads["c9_revision"]
        server = aegra_tables.detect(db)
        with psycopg.connect(deployment.dsn, row_factory=dict_row) as conn:
            runs = aegra_tables.run_ids(conn, server, "cliente_id", evidence.evidence_params("C9", [revision]))
        assert set(deployment.runs["c9_revision"]) <= runs  # and C9's other runs (their context names C9)
        runs = set(deployment.runs["c9_revision"])
        client.threads.delete(revision)
        with psycopg.connect(deployment.dsn, row_factory=dict_row) as conn:
            targets = [t for t in evidence.server_targets(conn) if t.name == "aegra.run_events"]

            def events(**kw) -> int:
                found = evidence.run_evidence_conn(conn, targets, "C9", [revision], **kw)
                return {e.table: e.result for e in found}["aegra.run_events"]

            left = conn.execute("SELECT count(*) AS n FROM run_events WHERE run_id = ANY(%s)", (sorted(runs),))
            left_behind = left.fetchone()["n"]
            assert left_behind > 0
            # counted by the captured ids, beside the events of C9's other runs (still there, found through runs)
            assert events(server_runs=runs) - events() == left_behind
        result = erasure.erase(db, "C9", operator="dpo@example.com", decisions=decisions)
        assert result.status == "incomplete"  # the orphaned events still hold C9's phone number
        assert "aegra.run_events" in result.report and "(no thread)" in result.report
        with psycopg.connect(deployment.dsn) as conn:
            for thread_id in (note, failed):
                assert conn.execute("SELECT count(*) FROM runs WHERE thread_id = %s", (thread_id,)).fetchone() == (0,)
        for thread_id in (note, failed):
            with pytest.raises(httpx.HTTPStatusError) as gone:
                client.threads.get(thread_id)
            assert gone.value.response.status_code == 404
    finally:
        deployment.server.stop()


# --- pages (AppTest; the browser walk is tests/test_browser_aegra.py) ---------------------------------------------


def _page(app_env, dsn: str, page: str, **env: str):
    app_env(dsn, **env)
    at = AppTest.from_file("../dashboard.py", default_timeout=30)
    at.run()
    at.switch_page(page).run()
    assert not at.exception
    return at


def test_the_checkpoints_page_shows_the_server_threads_and_flags_the_stuck_run(aegra, app_env):
    _wait_older_than(aegra, aegra.runs["c10_colgado"][0], 2)
    at = _page(app_env, aegra.dsn, "app_pages/checkpoints.py", AGENT_SERVER_STUCK_RUN_S="2")
    at.radio(key="checkpoints.view").set_value("server").run()
    assert not at.exception
    text = " ".join(e.value for e in at.error)
    assert "1 ejecuciones llevan más de 2 s" in text
    stuck = frame(at, "run_id", "idle_s")
    assert plain(stuck["run_id"]) == aegra.runs["c10_colgado"]
    threads = frame(at, "server_status", "agreement")
    by_id = dict(zip(plain(threads["thread_id"]), threads["agreement"], strict=True))
    assert by_id[aegra.threads["c9_fallido"]] == "solo en el servidor"
    assert by_id[aegra.threads["c9_retail"]] == "coinciden"
    assert any("no coinciden" in w.value for w in at.warning)
    at.selectbox(key="checkpoints.server.agreement").set_value("server_only").run()
    assert plain(frame(at, "server_status", "agreement")["thread_id"]) == [aegra.threads["c9_fallido"]]


def test_the_pages_without_an_agent_server(db, app_env):
    at = _page(app_env, db.dsn, "app_pages/checkpoints.py")
    at.radio(key="checkpoints.view").set_value("server").run()
    assert not at.exception
    assert any("no tiene tablas de un servidor de agentes" in i.value for i in at.info)


def test_the_degradation_page_names_the_server(aegra, app_env):
    at = _page(app_env, aegra.dsn, "app_pages/degradation.py")
    captions = " ".join(c.value for c in at.caption)
    assert "**Aegra**, migración `d042a0ca1cb5` (la de aegra-api " + md("0.6.0") + ")" in captions
