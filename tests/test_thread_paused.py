"""Threads paused by a static interrupt (`interrupt_before` / `interrupt_after`, compiled in or given at run time)
leave no `__interrupt__` write: the extraction marks them `paused` with the nodes scheduled next, as langgraph's own
`get_state().next` says (migration 086). Real graphs on PostgresSaver: a StateGraph compiled with each kind, one
given them at run time, a finished thread (never marked), a dynamic `interrupt()` (still `interrupted`), our retail
agent and the article's stock `create_agent` stopped before their tools (pending `Send`s); each resumed with
langgraph, and the mark goes at the next extraction."""

from __future__ import annotations

import operator
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, TypedDict

import psycopg
import pytest
from conftest import DIMS, login_role
from foreign_agents import ContextoCliente, ModeloGuion, build_cliente, llamada
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.postgres import PostgresStore
from langgraph.types import Command, interrupt
from prometheus_client import generate_latest

from core.db import Database
from core.history import thread_search as ts
from core.history import tool_calls
from core.migrate import SQL_DIR
from tests.test_definer_safety import AGENT_TABLES

MIGRATION = SQL_DIR / "086_thread_paused.sql"


class Estado(TypedDict):
    pasos: Annotated[list[str], operator.add]


def _paso(nombre: str):
    return lambda _estado: {"pasos": [nombre]}


def _revisar_con_humano(_estado: Estado) -> dict:
    return {"pasos": [f"revisado: {interrupt('¿apruebas la devolución?')}"]}


def pedido(saver, dynamic: bool = False, **compile_kw):
    """recibir -> revisar -> responder; `dynamic`: revisar asks a human with `interrupt()`."""
    g = StateGraph(Estado)
    g.add_node("recibir", _paso("recibir"))
    g.add_node("revisar", _revisar_con_humano if dynamic else _paso("revisar"))
    g.add_node("responder", _paso("responder"))
    g.add_edge(START, "recibir")
    g.add_edge("recibir", "revisar")
    g.add_edge("revisar", "responder")
    g.add_edge("responder", END)
    return g.compile(checkpointer=saver, **compile_kw)


def config(thread: str, **metadata) -> dict:
    return {"configurable": {"thread_id": thread}, "metadata": {"agente": "pedidos", **metadata}}


def summary(db: Database, thread: str) -> dict:
    return db.fetch_one("SELECT status, next_nodes FROM core_thread_summary WHERE thread_id = %s", (thread,))


def langgraph_says(graph, thread: str) -> tuple[str, list[str]]:
    """What langgraph's own state says: (status as we name it, the nodes it would run next)."""
    state = graph.get_state({"configurable": {"thread_id": thread}})
    interrupted = any(task.interrupts for task in state.tasks)
    errored = any(task.error for task in state.tasks)
    status = "error" if errored else "interrupted" if interrupted else "paused" if state.next else "idle"
    return status, sorted(set(state.next))


@pytest.fixture(scope="module")
def written(create_database):
    """Our graphs on one migrated database, extracted once: thread -> (graph, expected status, expected next)."""
    db = Database(create_database(prefix="paused"))
    saver = PostgresSaver(db.pool)
    before = pedido(saver, interrupt_before=["revisar"])
    after = pedido(saver, interrupt_after=["recibir"])
    plain = pedido(saver)
    dynamic = pedido(saver, dynamic=True)
    threads = {}
    before.invoke({"pasos": []}, config("antes-de-revisar"))
    threads["antes-de-revisar"] = (before, "paused", ["revisar"])
    after.invoke({"pasos": []}, config("despues-de-recibir"))
    threads["despues-de-recibir"] = (after, "paused", ["revisar"])
    plain.invoke({"pasos": []}, config("en-ejecucion-antes-de-responder"), interrupt_before=["responder"])
    threads["en-ejecucion-antes-de-responder"] = (plain, "paused", ["responder"])
    plain.invoke({"pasos": []}, config("terminado"))
    threads["terminado"] = (plain, "idle", [])
    dynamic.invoke({"pasos": []}, config("pide-aprobacion"))
    threads["pide-aprobacion"] = (dynamic, "interrupted", ["revisar"])
    result = tool_calls.extract(db)
    yield db, threads, result
    db.close()


def test_static_interrupts_are_paused_with_their_next_node_as_langgraph_says(written):
    db, threads, _ = written
    for thread, (graph, status, nodes) in threads.items():
        assert langgraph_says(graph, thread) == (status, nodes), thread  # the fixture is what we think it is
        assert summary(db, thread) == {"status": status, "next_nodes": nodes}, thread


def test_search_preset_and_metric_follow(written):
    db, threads, _ = written
    paused = {t for t, (_, s, _) in threads.items() if s == "paused"}
    # written seconds ago, a breakpoint looks like a run inside its step; once the window has passed it is a pause
    later = datetime.now(UTC) + ts.RUNNING_WINDOW + timedelta(minutes=1)
    found = ts.search_threads(db, ts.ThreadQuery(status="paused", limit=100), now=later)
    assert set(found.threads["thread_id"]) == paused and found.total == 3
    assert set(found.threads["next_nodes"]) == {"revisar", "responder"} and set(found.threads["status"]) == {"paused"}
    stuck = ts.search_threads(db, ts.preset("stuck"), now=later)
    assert set(stuck.threads["thread_id"]) == paused | {"pide-aprobacion"}
    assert set(ts.search_threads(db, ts.preset("stuck")).threads["thread_id"]) == {"pide-aprobacion"}
    assert set(ts.search_threads(db, ts.ThreadQuery(status="interrupted")).threads["thread_id"]) == {"pide-aprobacion"}
    assert set(ts.search_threads(db, ts.ThreadQuery(status="finished")).threads["thread_id"]) == {"terminado"}

    from core.operations.exporter import usage_metrics

    with psycopg.connect(db.dsn, row_factory=psycopg.rows.dict_row) as conn:
        text = generate_latest(_registry(usage_metrics(conn, ()))).decode()
    assert 'agent_memory_threads{status="paused"} 3.0' in text
    assert 'agent_memory_threads{status="interrupted"} 1.0' in text


def test_statuses_are_exclusive_and_add_up_to_every_thread(written):
    """Each thread has one status; the counts add up to the threads the checkpoints hold (SQL on the agents' table),
    and a thread written seconds ago is finished only when its run finished (else running, then paused)."""
    db, threads, _ = written
    in_sql = db.fetch_one("SELECT count(DISTINCT thread_id) AS n FROM checkpoints WHERE checkpoint_ns = ''")["n"]
    for now in (datetime.now(UTC), datetime.now(UTC) + ts.RUNNING_WINDOW + timedelta(minutes=1)):
        counts = ts.status_counts(db, now)
        assert counts.total == in_sql == len(threads) == sum(counts.counts.values())
        found = {
            s: set(ts.search_threads(db, ts.ThreadQuery(status=s, limit=100), now=now).threads["thread_id"])
            for s in ts.STATES
        }
        assert {s: len(f) for s, f in found.items()} == counts.counts
        assert set().union(*found.values()) == set(threads)  # every thread once: the sets are disjoint
        assert sum(map(len, found.values())) == len(threads)
        shown = ts.search_threads(db, ts.ThreadQuery(limit=100), now=now).threads
        assert {r.thread_id: r.status for r in shown.itertuples()} == {t: s for s, f in found.items() for t in f}
    written_now = ts.status_counts(db)
    assert written_now.counts["finished"] == 1 and written_now.counts["running"] == 3  # only "terminado" finished
    assert set(found["finished"]) == {"terminado"} and set(found["paused"]) == {
        t for t, (_, s, _) in threads.items() if s == "paused"
    }


def _registry(metrics):
    from prometheus_client import CollectorRegistry

    class Fixed:
        def collect(self):
            return metrics

    registry = CollectorRegistry()
    registry.register(Fixed())
    return registry


def test_resumed_threads_lose_the_mark_at_the_next_extraction(create_database):
    db = Database(create_database(prefix="resume"))
    try:
        saver = PostgresSaver(db.pool)
        before, dynamic = pedido(saver, interrupt_before=["revisar"]), pedido(saver, dynamic=True)
        before.invoke({"pasos": []}, config("r-antes"))
        dynamic.invoke({"pasos": []}, config("r-humano"))
        tool_calls.extract(db)
        assert summary(db, "r-antes")["status"] == "paused" and summary(db, "r-humano")["status"] == "interrupted"
        out = before.invoke(None, config("r-antes"))  # a static breakpoint resumes with no input
        assert out["pasos"] == ["recibir", "revisar", "responder"]
        dynamic.invoke(Command(resume="sí"), config("r-humano"))
        assert summary(db, "r-antes")["status"] == "paused"  # as of the last extraction, until the next one
        tool_calls.extract(db)
        assert summary(db, "r-antes") == {"status": "idle", "next_nodes": []}
        assert summary(db, "r-humano") == {"status": "idle", "next_nodes": []}
        assert langgraph_says(before, "r-antes") == ("idle", [])
    finally:
        db.close()


def test_agents_stopped_before_their_tools_are_paused(create_database, article_agents):
    """`create_agent` sends each tool call to `tools` with a `Send`: the pending task is in `__pregel_tasks`.
    Our retail agent (run-time interrupt_before) and the article's stock agent on a database it wrote itself."""
    from core.agents.retail import ContextoCliente as Ctx
    from core.agents.retail import build_agent
    from core.agents.scripted_model import ScriptedChatModel
    from core.memory.embeddings import OfflineHashEmbeddings
    from core.memory.store import build_store

    db = Database(create_database(prefix="agents"))
    foreign = Database(article_agents().dsn)
    try:
        store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
        ours = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(db.pool))
        cfg = {
            "configurable": {"thread_id": "cliente-C7-1"},
            "metadata": {"cliente_id": "C7", "agente": "atencion-cliente"},
        }
        ours.invoke(
            {"messages": [HumanMessage("Quiero recoger un pedido, ¿qué me propones?")]},
            config=cfg,
            context=Ctx("C7"),
            interrupt_before=["tools"],
        )
        assert ours.get_state(cfg).next == ("tools",)
        tool_calls.extract(db)
        assert summary(db, "cliente-C7-1") == {"status": "paused", "next_nodes": ["tools"]}
        ours.invoke(None, config=cfg, context=Ctx("C7"))
        tool_calls.extract(db)
        assert summary(db, "cliente-C7-1") == {"status": "idle", "next_nodes": []}

        # the article's agents: every thread they wrote finished (none marked), then one stopped after its model
        tool_calls.extract(foreign)
        written = foreign.fetch("SELECT status, count(*) AS n FROM core_thread_summary GROUP BY status")
        assert [(r["status"], r["n"]) for r in written] == [("idle", 30)]
        thread = f"conv-{uuid.uuid4()}"
        saver, store = PostgresSaver(foreign.pool), PostgresStore(foreign.pool)
        modelo = ModeloGuion(
            responses=[llamada("recordar_preferencia", 1, tipo="contacto", valor="SMS"), AIMessage(content="Anotado.")]
        )
        agente = build_cliente(modelo, saver, store)
        acfg = {"configurable": {"thread_id": thread}}
        agente.invoke(
            {"messages": [HumanMessage("Quiero contacto: SMS")]},
            config=acfg,
            context=ContextoCliente("C9", "T001"),
            interrupt_after=["model"],
        )
        assert agente.get_state(acfg).next == ("tools",)
        tool_calls.extract(foreign)
        assert summary(foreign, thread) == {"status": "paused", "next_nodes": ["tools"]}
        agente.invoke(None, config=acfg, context=ContextoCliente("C9", "T001"))
        tool_calls.extract(foreign)
        assert summary(foreign, thread) == {"status": "idle", "next_nodes": []}
    finally:
        db.close()
        foreign.close()


def test_an_upgraded_database_finds_its_paused_threads(written):
    """Rows extracted before migration 086 said `idle`: the migration reads their checkpoints once more."""
    db, threads, _ = written
    db.execute("UPDATE core_thread_summary SET status = 'idle', next_nodes = '{}' WHERE status = 'paused'")
    with psycopg.connect(db.dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(MIGRATION.read_text())  # the migration is re-runnable: what an upgrade runs
    for thread, (_, status, nodes) in threads.items():
        assert summary(db, thread) == {"status": status, "next_nodes": nodes}, thread


def test_a_bad_status_is_refused_and_reads_nothing():
    with pytest.raises(ts.BadQuery, match="status must be one of"):
        ts.ThreadQuery.from_params({"status": "pausado"})
    assert ts.ThreadQuery.from_params({"status": "stopped"}).status == "stopped"


def test_an_agent_role_can_call_none_of_the_new_functions(written):
    db, _, _ = written
    agent = login_role(db.dsn, "agent", AGENT_TABLES)
    with psycopg.connect(agent, autocommit=True) as conn:
        for statement in (
            "SELECT core_next_nodes('antes-de-revisar', '', '{}'::jsonb)",
            "SELECT core_channel_version_newer('1'::jsonb, '0'::jsonb)",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("UPDATE core_thread_summary SET status = 'idle'")


def test_the_page_names_the_pause_and_its_node(written, app_env):
    import tomllib

    from apptools import frame
    from streamlit.testing.v1 import AppTest

    db, threads, _ = written
    app_env(db.dsn)
    at = AppTest.from_file("../dashboard.py", default_timeout=60)
    at.query_params["view"] = "search"
    at.run()
    at.switch_page("app_pages/checkpoints.py").run()
    at.button(key="checkpoints.search.stuck").click().run()
    assert not at.exception and at.query_params["status"] == "stopped"
    # written seconds ago: the breakpoints are still in the running window, the interrupt is stuck at once
    assert set(frame(at, "thread_id", "status")["thread_id"]) == {"pide-aprobacion"}
    at.query_params["status"] = "running"
    at.run()
    shown = frame(at, "thread_id", "status")
    assert set(shown["thread_id"]) == {t for t, (_, s, _) in threads.items() if s == "paused"}
    running = shown[shown["thread_id"] == "antes-de-revisar"].iloc[0]
    assert running["status"] == "En curso (últimos 15 min)" and running["next_nodes"] == "revisar"
    # the five statuses side by side, adding up to every thread
    # (short labels, read whole side by side; each status's full name in the help: issue 54 #8)
    counts = {m.label: m.value for m in at.metric}
    assert counts["Todos los hilos"] == str(len(threads))
    assert counts["Terminado"] == "1" and counts["En curso"] == "3"
    assert counts["En pausa"] == "0" and counts["Interrumpido"] == "1"
    helps = {m.label: m.help for m in at.metric}
    assert (
        helps["En curso"] == "En curso (últimos 15 min)" and helps["Interrumpido"] == "Interrumpido (espera respuesta)"
    )
    english = tomllib.loads((Path(__file__).parent.parent / "ui/locales/en.toml").read_text())
    assert english["search_status_paused"] == "Paused before a node" and english["col_next_nodes"] == "Next node"
    assert (
        english["search_status_running"] == "Running (last 15 min)" and english["search_status_finished"] == "Finished"
    )
