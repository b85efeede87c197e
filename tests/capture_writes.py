"""Stock writes for the change follower's tests (tests/test_capture_follower.py, tests/test_capture_property.py),
importable by a test and runnable as a writer process: `python tests/capture_writes.py DSN SEED OPS AGENTS`, where
AGENTS is `ours` (our retail agent, core/agents) or `article` (the memory article's agents, tests/foreign_agents.py).
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import psycopg
from langgraph.store.base import PutOp
from psycopg_pool import ConnectionPool

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from conftest import DIMS  # noqa: E402

from core.memory.embeddings import OfflineHashEmbeddings  # noqa: E402
from core.memory.store import build_store  # noqa: E402


def vector_store(dsn: str):
    """A stock PostgresStore with a vector index (the seed's), autocommit, on its own connection."""
    conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=psycopg.rows.dict_row)
    return conn, build_store(conn, OfflineHashEmbeddings(DIMS), DIMS)


def store_writes(dsn: str, seed: int, n: int = 120) -> None:
    """Stock writes: puts (new, overwrite, with TTL, with a vector, with and without a `hilo` back-link), TTL
    refreshes on read, deletes, batched deletes and a TTL sweep."""
    rng = random.Random(seed)
    conn, store = vector_store(dsn)
    with conn:
        keys: list[tuple[tuple[str, ...], str]] = []
        for i in range(n):
            r = rng.random()
            if r < 0.55 or not keys:
                root = rng.choice(["clientes", "clientes", "proveedores"])
                ns = (root, f"C{rng.randrange(6)}", rng.choice(["prefs", "notas"]))
                key = f"k{rng.randrange(40)}"
                ttl = rng.choice([0.001, None, 60 * 24, 60 * 24 * 30])  # 0.06 s: expired by the sweep below
                value = {"texto": rng.choice(["casa", "tienda T003", "por la tarde", f"nota {i}"]), "i": i}
                link = rng.random()
                if link < 0.5:  # the article's back-link to the conversation (kept for customers' documents only)
                    value["hilo"] = f"hilo-{rng.randrange(5)}"
                elif link < 0.6:
                    value["hilo"] = i  # not a thread id: no link
                store.put(ns, key, value, ttl=ttl, index=None if rng.random() < 0.3 else False)
                keys.append((ns, key))
            elif r < 0.68:
                ns, key = rng.choice(keys)
                store.put(ns, key, {"texto": "otra vez", "again": True}, index=False)  # overwrite: an UPDATE
            elif r < 0.75:
                ns, key = rng.choice(keys)
                store.get(ns, key, refresh_ttl=True)  # a TTL refresh: an UPDATE of expires_at only
            elif r < 0.93:
                ns, key = keys.pop(rng.randrange(len(keys)))
                store.delete(ns, key)
            else:
                picked = [keys.pop(rng.randrange(len(keys))) for _ in range(min(3, len(keys)))]
                store.batch([PutOp(ns, key, None) for ns, key in picked])
        time.sleep(0.2)
        store.sweep_ttl()


def graph_turns(dsn: str, seed: int, n: int = 30) -> None:
    """Stock graph turns on PostgresSaver (a subgraph's checkpoints too), the customer named in the run's metadata or
    not, delete_thread, and a hand-made metadata rewrite of one checkpoint."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import START, MessagesState, StateGraph

    def reply(state: MessagesState):
        return {"messages": [("ai", "vale")]}

    inner = StateGraph(MessagesState)
    inner.add_node("reply", reply)
    inner.add_edge(START, "reply")
    outer = StateGraph(MessagesState)
    outer.add_node("inner", inner.compile())
    outer.add_edge(START, "inner")
    rng = random.Random(seed)
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=psycopg.rows.dict_row) as conn:
        graph = outer.compile(checkpointer=PostgresSaver(conn))
        for i in range(n):
            thread = f"cliente-C{rng.randrange(4)}-{rng.randrange(6)}"
            configurable = {"thread_id": thread}
            if rng.random() < 0.6:
                configurable[rng.choice(["cliente_id", "customer_id", "user_id"])] = f"C{rng.randrange(4)}"
            graph.invoke({"messages": [("user", f"hola {i}")]}, {"configurable": configurable})
            if rng.random() < 0.15:
                graph.checkpointer.delete_thread(thread)
        conn.execute(
            "UPDATE checkpoints SET metadata = metadata || '{\"cliente_id\": 7}' "
            "WHERE ctid = (SELECT ctid FROM checkpoints LIMIT 1)"
        )


def our_agent_turns(dsn: str, seed: int, n: int = 4) -> None:
    """Our retail agent (scripted model, stock PostgresSaver and our store): preferences written by
    `recordar_preferencia`, the customer in checkpoint metadata."""
    from langgraph.checkpoint.postgres import PostgresSaver

    from core.agents.retail import ContextoCliente, build_agent, run_turn
    from core.agents.scripted_model import ScriptedChatModel

    rng = random.Random(seed)
    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": psycopg.rows.dict_row}
    with ConnectionPool(dsn, min_size=1, max_size=4, kwargs=kwargs) as pool:
        store = build_store(pool, OfflineHashEmbeddings(DIMS), DIMS)
        agent = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(pool))
        for _ in range(n):
            customer = f"C{rng.randrange(4)}"
            text = rng.choice(
                ["Prefiero recoger mis pedidos en la tienda Diagonal.", "¿Qué preferencias tengo?", "Hola"]
            )
            run_turn(agent, ContextoCliente(customer), f"cliente-{customer}-{rng.randrange(3)}", text)


def article_turns(dsn: str, seed: int, n: int = 4) -> None:
    """The memory article's agents (tests/foreign_agents.py) on a sample of its script."""
    from foreign_agents import run_conversations, script

    rng = random.Random(seed)
    run_conversations(dsn, rng.sample(script(), n))


def mixed(dsn: str, seed: int, ops: int, agents: str) -> None:
    """A random mix: stock store writes, graph turns with subgraphs, the agents' own turns, the sweep (TTL deletes,
    retention, a prune), and one erasure."""
    from core.db import Database
    from core.operations.sweep import run_sweep
    from core.privacy.erasure import erase
    from core.storage.prune import PrunePolicy

    rng = random.Random(seed)
    turns = our_agent_turns if agents == "ours" else article_turns
    erased = False
    for op in range(ops):
        r = rng.random()
        if r < 0.35:
            store_writes(dsn, seed * 1000 + op, n=20)
        elif r < 0.6:
            graph_turns(dsn, seed * 1000 + op, n=5)
        elif r < 0.85:
            turns(dsn, seed * 1000 + op, n=2)
        else:
            db = Database(dsn)
            try:
                if not erased and r > 0.95:
                    erase(db, f"C{rng.randrange(4)}", operator="property-test")
                    erased = True
                else:
                    run_sweep(db, trigger="manual", prune=PrunePolicy(keep_latest=2))
            finally:
                db.close()


if __name__ == "__main__":
    mixed(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
