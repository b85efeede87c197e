"""History pruning (core/storage/prune.py) proved with langgraph's own reads: for every thread of databases written
by our agents, by agents built from the articles, by a graph with a subgraph paused on an interrupt and by a graph
with a DeltaChannel, `get_state()` returns the same before and after pruning, `get_state_history()` returns the kept
checkpoints with the same values, the interrupted thread resumes, and a pruned thread goes on normally. Real embedded
PostgreSQL, real graphs, stock savers; nothing is mocked."""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg
import pytest
from conftest import settings_for
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.types import Command
from prune_graphs import delta_graph, describe, subgraph_with_interrupt
from psycopg.rows import dict_row

from core.db import Database
from core.history import tool_calls
from core.storage import prune

COUNTS = """
SELECT (SELECT count(*) FROM checkpoints) AS checkpoints, (SELECT count(*) FROM checkpoint_writes) AS writes,
       (SELECT count(*) FROM checkpoint_blobs) AS blobs"""


def connect(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row)


def read_all(graph_for: Callable[[str], object], threads: list[str]) -> dict[str, tuple[dict, list[dict]]]:
    """Per thread: get_state(subgraphs=True) and the whole get_state_history(), described."""
    out = {}
    for t in threads:
        graph, config = graph_for(t), {"configurable": {"thread_id": t}}
        out[t] = (
            describe(graph.get_state(config, subgraphs=True)),
            [describe(s) for s in graph.get_state_history(config)],
        )
    return out


def threads_of(db: Database) -> list[str]:
    return [r["thread_id"] for r in db.fetch("SELECT DISTINCT thread_id FROM checkpoints ORDER BY 1")]


def prove(db: Database, graph_for: Callable[[str], object], keep: int, **policy) -> prune.PruneResult:
    """Dry run (changes nothing, names what the run then deletes), run, and the proof on every thread."""
    threads = threads_of(db)
    before = read_all(graph_for, threads)
    counts = db.fetch_one(COUNTS)
    namespaces_before = {
        (r["thread_id"], r["checkpoint_ns"]): r["ids"]
        for r in db.fetch(
            "SELECT thread_id, checkpoint_ns, array_agg(checkpoint_id ORDER BY checkpoint_id DESC) AS ids "
            "FROM checkpoints GROUP BY 1, 2"
        )
    }
    policy = prune.validate_policy(keep, **policy)
    tool_calls.extract(db)  # as the sweep does: the prune keeps what the extraction has not read
    with connect(db.dsn) as conn:
        dry = prune.prune_history(conn, policy, dry_run=True, batch_threads=3)
        assert db.fetch_one(COUNTS) == counts, "a dry run deleted something"
        done = prune.prune_history(conn, policy, batch_threads=3)
    assert done.checkpoints > 0, "the proof must prune something"
    assert [(t.thread_id, t.checkpoints, t.writes, t.blobs, t.bytes) for t in dry.threads] == [
        (t.thread_id, t.checkpoints, t.writes, t.blobs, t.bytes) for t in done.threads
    ]
    after = counts_now = db.fetch_one(COUNTS)
    assert counts_now == {
        "checkpoints": counts["checkpoints"] - done.checkpoints,
        "writes": counts["writes"] - done.writes,
        "blobs": counts["blobs"] - done.blobs,
    }
    after = read_all(graph_for, threads)
    for t in threads:
        state_before, history_before = before[t]
        state_after, history_after = after[t]
        assert state_after == state_before, t
        by_id = {h["checkpoint_id"]: h for h in history_before}
        ids_after = [h["checkpoint_id"] for h in history_after]
        assert [h["checkpoint_id"] for h in history_before][:keep] == ids_after[:keep], t
        for h in history_after:  # every kept checkpoint reads as it did
            assert h == by_id[h["checkpoint_id"]], (t, h["checkpoint_id"])
    for (t, ns), ids in namespaces_before.items():
        left = {
            r["checkpoint_id"]
            for r in db.fetch(
                "SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s", (t, ns)
            )
        }
        # the latest `keep` of every namespace are still there, but a finished subgraph call's (`node:task_id`)
        assert set(ids[:keep]) <= left or (":" in ns and not left), (t, ns)
    return done


# --- graphs written here ---------------------------------------------------------------------------------------------


def test_subgraph_paused_on_an_interrupt_reads_and_resumes_the_same_after_pruning(db):
    saver = PostgresSaver(db.pool)
    graph = subgraph_with_interrupt(saver)
    for thread, tag in (("hilo-podado", "x"), ("hilo-testigo", "y")):
        config = {"configurable": {"thread_id": thread}, "metadata": {"agente": tag}}
        for turn in range(3):
            graph.invoke({"log": [f"turno{turn}"]}, config)  # pauses inside the subgraph
            if turn < 2:
                graph.invoke(Command(resume=f"sí{turn}"), config)
    paused = graph.get_state({"configurable": {"thread_id": "hilo-podado"}}, subgraphs=True)
    assert paused.interrupts and paused.tasks[0].state.next == ("ask",)
    assert db.fetch_one("SELECT count(DISTINCT checkpoint_ns) AS n FROM checkpoints")["n"] > 2  # subgraph namespaces

    calls = "SELECT DISTINCT checkpoint_ns FROM checkpoints WHERE thread_id = %s AND checkpoint_ns <> ''"
    before = {r["checkpoint_ns"] for r in db.fetch(calls, ("hilo-podado",))}
    result = prove(db, lambda t: graph, keep=2, agent="x")
    assert [t.thread_id for t in result.threads] == ["hilo-podado"]
    # The finished subgraph calls went with the root checkpoints they started from; the paused one stays.
    after = {r["checkpoint_ns"] for r in db.fetch(calls, ("hilo-podado",))}
    assert len(before) == 3 and after == {paused.tasks[0].state.config["configurable"]["checkpoint_ns"]}

    # Resuming the pruned thread gives what resuming its unpruned twin gives.
    outs = {
        t: graph.invoke(Command(resume="sí"), {"configurable": {"thread_id": t}})["log"]
        for t in ("hilo-podado", "hilo-testigo")
    }
    assert outs["hilo-podado"] == outs["hilo-testigo"]
    assert outs["hilo-podado"][-2:] == ["respuesta:sí", "fin"]


def test_delta_channel_keeps_the_snapshot_and_the_writes_since(db):
    saver = PostgresSaver(db.pool)
    graph = delta_graph(saver)
    config = {"configurable": {"thread_id": "delta"}}
    for turn in range(3):
        graph.invoke({"items": [f"in{turn}"], "n": 0}, config)
    assert db.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE metadata ? 'counters_since_delta_snapshot'")["n"]

    for keep in (5, 1):  # the newest is not a snapshot: its chain back to one is kept
        prove(db, lambda t: graph, keep=keep)

    # A pruned delta thread goes on: the channel still replays from the kept snapshot and writes.
    items = graph.get_state(config).values["items"]
    assert len(items) == 3 * 5
    assert graph.invoke({"items": ["más"], "n": 0}, config)["items"] == items + ["más", "i0", "i1", "i2", "i3"]


def test_writes_after_the_cut_are_never_deleted(db):
    saver = PostgresSaver(db.pool)
    graph = delta_graph(saver)
    config = {"configurable": {"thread_id": "vivo"}}
    graph.invoke({"items": ["a"], "n": 0}, config)
    policy = prune.validate_policy(1)
    with connect(db.dsn) as conn:
        cut = prune.take_cut(conn, policy)
        graph.invoke({"items": ["b"], "n": 0}, config)  # an agent writes after the cut, before the batch
        new = {
            r["checkpoint_id"]
            for r in db.fetch("SELECT checkpoint_id FROM checkpoints WHERE checkpoint_id > %s", (cut["vivo"][""],))
        }
        assert new
        with conn.transaction():
            prune.apply_plans(conn, prune.plan_batch(conn, cut, ["vivo"], 1))
    left = {r["checkpoint_id"] for r in db.fetch("SELECT checkpoint_id FROM checkpoints")}
    assert new <= left
    assert graph.get_state(config).values["items"] == ["a", "i0", "i1", "i2", "i3", "b", "i0", "i1", "i2", "i3"]


def test_an_agent_writing_during_repeated_prunes_loses_nothing(db):
    saver = PostgresSaver(db.pool)
    graph = delta_graph(saver)
    config = {"configurable": {"thread_id": "concurrente"}}
    turns, errors = 12, []

    def agent() -> None:
        try:
            for turn in range(turns):
                graph.invoke({"items": [f"t{turn}"], "n": 0}, config)
        except Exception as exc:  # reported below
            errors.append(exc)

    writer = threading.Thread(target=agent)
    writer.start()
    pruned = 0
    with connect(db.dsn) as conn:
        while writer.is_alive():
            tool_calls.extract(db)  # as the sweep does: the prune keeps what the extraction has not read
            pruned += prune.prune_history(conn, prune.validate_policy(1)).checkpoints
    writer.join()
    assert not errors
    assert pruned > 0
    expected = [x for turn in range(turns) for x in (f"t{turn}", "i0", "i1", "i2", "i3")]
    assert graph.get_state(config).values["items"] == expected


def test_erased_threads_stay_erased_and_are_never_listed(db):
    saver = PostgresSaver(db.pool)
    graph = delta_graph(saver)
    for t in ("borrado", "vivo"):
        graph.invoke({"items": ["a"], "n": 0}, {"configurable": {"thread_id": t}})
    db.execute("INSERT INTO core_thread_tombstones (thread_id) VALUES ('borrado')")
    before = db.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE thread_id = 'borrado'")["n"]
    tool_calls.extract(db)
    with connect(db.dsn) as conn:
        result = prune.prune_history(conn, prune.validate_policy(1))
    assert [t.thread_id for t in result.threads] == ["vivo"]
    assert db.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE thread_id = 'borrado'")["n"] == before


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"keep_latest": 0}, ">= 1"),
        ({"keep_latest": "dos"}, "whole number"),
        ({"keep_latest": True}, "whole number"),
        ({"keep_latest": 2, "idle_minutes": -1}, ">= 0"),
        ({"keep_latest": 2, "root": "clients"}, "one of"),
        ({"keep_latest": 2, "agent": " x"}, "surrounding"),
    ],
)
def test_bad_policy_is_a_clear_error(kwargs, message):
    with pytest.raises(prune.PruneInputError, match=message):
        prune.validate_policy(**kwargs)


def test_idle_minutes_and_root_filters(db):
    saver = PostgresSaver(db.pool)
    graph = delta_graph(saver)
    graph.invoke({"items": ["a"], "n": 0}, {"configurable": {"thread_id": "c"}, "metadata": {"cliente_id": "C1"}})
    graph.invoke({"items": ["a"], "n": 0}, {"configurable": {"thread_id": "e"}, "metadata": {"empleado_id": "E1"}})
    with connect(db.dsn) as conn:
        assert prune.take_cut(conn, prune.validate_policy(1, idle_minutes=5)) == {}  # both just written
        assert set(prune.take_cut(conn, prune.validate_policy(1, idle_minutes=0))) == {"c", "e"}
        assert set(prune.take_cut(conn, prune.validate_policy(1, root="clientes"))) == {"c"}
        assert set(prune.take_cut(conn, prune.validate_policy(5))) == {"c", "e"}  # 6 checkpoints each
        assert prune.take_cut(conn, prune.validate_policy(6)) == {}


# --- databases written by agents
# ---------------------------------------------------------------------------------------


def test_every_thread_of_our_agents_reads_the_same_after_pruning(db):
    from core.agents.retail import build_agent
    from core.agents.scripted_model import ScriptedChatModel
    from core.demo.seed import seed
    from core.memory.embeddings import OfflineHashEmbeddings
    from core.memory.store import build_store

    seed(db, settings_for(db.dsn), customers=6, days=3)
    store = build_store(db.pool, OfflineHashEmbeddings(64), 64)
    saver = PostgresSaver(db.pool)
    agents = {
        k: build_agent(k, ScriptedChatModel(), store=store, checkpointer=saver)
        for k in ("atencion-cliente", "compras", "ajustes-personal")
    }
    kinds = {
        r["thread_id"]: r["agente"]
        for r in db.fetch("SELECT thread_id, max(metadata ->> 'agente') AS agente FROM checkpoints GROUP BY 1")
    }
    assert len(kinds) > 20 and set(kinds.values()) == set(agents)
    prove(db, lambda t: agents[kinds[t]], keep=2)
    # A pruned thread goes on: one more turn adds its messages to those kept.
    from core.agents.retail import ContextoCliente, run_turn

    thread = next(t for t, k in kinds.items() if k == "atencion-cliente")
    config = {"configurable": {"thread_id": thread}}
    before = agents["atencion-cliente"].get_state(config).values["messages"]
    cid = thread.split("-")[1]
    after = run_turn(agents["atencion-cliente"], ContextoCliente(cid), thread, "¿Y el horario?")["messages"]
    assert [m.id for m in after[: len(before)]] == [m.id for m in before] and len(after) > len(before)


def test_every_thread_of_the_articles_agents_reads_the_same_after_pruning(article_agents):
    from foreign_agents import ModeloGuion, build_cliente
    from langgraph.store.postgres import PostgresStore

    foreign = article_agents()
    database = Database(foreign.dsn)
    try:
        store = PostgresStore(database.pool)
        graph = build_cliente(ModeloGuion(responses=[]), PostgresSaver(database.pool), store)
        prove(database, lambda t: graph, keep=1)
    finally:
        database.close()
