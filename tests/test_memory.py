"""The memory store and the agents' tools on a real PostgreSQL (TTL needs PostgresStore:
InMemoryStore refuses `ttl=`, see test_in_memory_store_refuses_ttl, so every TTL test is here)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import psycopg
import pytest
from conftest import DIMS
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.store.memory import InMemoryStore

from core.agents.retail import (
    ContextoCliente,
    ContextoProveedor,
    avisos_proveedor,
    build_agent,
    preferencias,
    recordar_preferencia,
    run_turn,
)
from core.agents.scripted_model import ScriptedChatModel
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import (
    POLICIES,
    InvalidIdentifier,
    UnknownNamespace,
    build_store,
    get_memory,
    put_memory,
    search_memory,
    validate_label,
)
from core.migrate import EmbeddingDimsMismatch, migrate


@pytest.fixture
def store(db):
    return build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)


@pytest.fixture
def agents(db, store):
    saver = PostgresSaver(db.pool)
    model = ScriptedChatModel()
    return {k: build_agent(k, model, store=store, checkpointer=saver) for k in ("atencion-cliente", "compras")}


def row(db, prefix, key):
    return db.fetch_one(
        "SELECT ttl_minutes, expires_at, expires_at - now() AS left FROM store WHERE prefix=%s AND key=%s",
        (prefix, key),
    )


def test_preference_survives_the_thread_for_c9(agents, db):
    run_turn(
        agents["atencion-cliente"], ContextoCliente("C9"), "t-1", "Prefiero recoger mis pedidos en la tienda Gran Vía."
    )
    # A new thread of the same customer: the preference is in the prompt and in the tool.
    result = run_turn(agents["atencion-cliente"], ContextoCliente("C9"), "t-2", "¿Qué preferencias tengo guardadas?")
    tool_msgs = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert tool_msgs and "recogida: Gran Vía" in tool_msgs[-1].content
    hello = run_turn(agents["atencion-cliente"], ContextoCliente("C9"), "t-3", "Hola")
    assert "con tus preferencias en cuenta" in hello["messages"][-1].content
    assert db.fetch_one("SELECT count(*) AS n FROM store WHERE prefix='clientes.C9'")["n"] == 1


def test_c10_sees_nothing_from_another_thread_and_agent(agents, db):
    run_turn(agents["atencion-cliente"], ContextoCliente("C9"), "t-a", "Prefiero que me atendáis en catalán.")
    run_turn(agents["compras"], ContextoProveedor("P1"), "t-b", "aviso retraso: Los abrigos llegan tarde")
    result = run_turn(agents["atencion-cliente"], ContextoCliente("C10"), "t-c", "¿Qué preferencias tengo guardadas?")
    tool_msgs = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert tool_msgs[-1].content == ""
    hello = run_turn(agents["atencion-cliente"], ContextoCliente("C10"), "t-d", "Hola")
    assert "preferencias" not in hello["messages"][-1].content


def test_a_notice_several_suppliers_published_is_told_once(agents, db):
    """Issue 54 finding 8: four suppliers published the same notice; the customer was told it four times (the tool
    listed one line per supplier's document) and read it four times in their access export. Each notice once."""
    text = "Rotura de stock de zapatillas deportivas hasta nuevo aviso"
    late = "Las zapatillas deportivas llegan tarde"
    for n in range(1, 5):
        run_turn(agents["compras"], ContextoProveedor(f"P{n}"), f"t-p{n}", f"aviso rotura_stock: {text}")
    run_turn(agents["compras"], ContextoProveedor("P5"), "t-p5", f"aviso retraso: {late}")
    question = "¿Hay avisos sobre zapatillas deportivas?"
    result = run_turn(agents["atencion-cliente"], ContextoCliente("C9"), "t-q", question)
    told = next(m.content for m in result["messages"] if isinstance(m, ToolMessage) and m.name == "avisos_proveedor")
    assert told.count(text) == 1, told
    assert late in told  # a different notice is still told


def test_tools_without_store_return_empty():
    agent = build_agent("atencion-cliente", ScriptedChatModel(), store=None)
    for text in (
        "Prefiero que me atendáis en catalán.",
        "¿Qué preferencias tengo guardadas?",
        "¿Hay avisos sobre abrigos?",
    ):
        result = agent.invoke({"messages": [{"role": "user", "content": text}]}, context=ContextoCliente("C9"))
        tool_msgs = [m for m in result["messages"] if isinstance(m, ToolMessage)]
        assert len(tool_msgs) == 1 and tool_msgs[0].content == "" and tool_msgs[0].status != "error"
    assert {t.name for t in (recordar_preferencia, preferencias, avisos_proveedor)} <= set(
        agent.nodes["tools"].bound.tools_by_name
    )


def test_overwrite_by_tipo_and_write_log(agents, db):
    for tienda in ("Gran Vía", "Diagonal"):
        run_turn(
            agents["atencion-cliente"],
            ContextoCliente("C9"),
            f"t-{tienda}",
            f"Prefiero recoger mis pedidos en la tienda {tienda}.",
        )
    docs = db.fetch("SELECT key, value->>'valor' AS valor FROM store WHERE prefix='clientes.C9'")
    assert docs == [{"key": "pref-recogida", "valor": "Diagonal"}]
    log = db.fetch("SELECT prefix, key, thread_id, agent FROM core_memory_writes ORDER BY id")
    assert log == [
        {"prefix": "clientes.C9", "key": "pref-recogida", "thread_id": "t-Gran Vía", "agent": "atencion-cliente"},
        {"prefix": "clientes.C9", "key": "pref-recogida", "thread_id": "t-Diagonal", "agent": "atencion-cliente"},
    ]


def test_checkpoint_metadata_carries_the_customer(agents, db):
    run_turn(agents["atencion-cliente"], ContextoCliente("C9"), "t-meta", "Hola")
    ids = {r["c"] for r in db.fetch("SELECT metadata->>'cliente_id' AS c FROM checkpoints WHERE thread_id='t-meta'")}
    assert ids == {"C9"}
    conv = db.fetch_one("SELECT subject_root, subject_id, turns FROM core_conversations WHERE thread_id='t-meta'")
    assert conv == {"subject_root": "clientes", "subject_id": "C9", "turns": 1}


@pytest.mark.parametrize("root", list(POLICIES))
def test_ttl_written_per_namespace(store, db, root):
    put_memory(store, (root, "X1"), "k", {"texto": "hola"})
    r = row(db, f"{root}.X1", "k")
    assert r["ttl_minutes"] == POLICIES[root].ttl_days * 24 * 60
    expected = timedelta(days=POLICIES[root].ttl_days)
    assert expected - timedelta(minutes=1) < r["left"] <= expected


def test_refresh_on_read_for_clientes_not_for_proveedores(store, db):
    put_memory(store, ("clientes", "C9"), "pref-idioma", {"texto": "idioma: catalán"})
    put_memory(store, ("proveedores", "P1"), "aviso-retraso", {"texto": "retraso"})
    before_c, before_p = (
        row(db, "clientes.C9", "pref-idioma")["expires_at"],
        row(db, "proveedores.P1", "aviso-retraso")["expires_at"],
    )
    time.sleep(0.05)
    assert get_memory(store, ("clientes", "C9"), "pref-idioma") is not None
    assert get_memory(store, ("proveedores", "P1"), "aviso-retraso") is not None
    assert search_memory(store, ("proveedores",), query="retraso")
    assert row(db, "clientes.C9", "pref-idioma")["expires_at"] > before_c
    assert row(db, "proveedores.P1", "aviso-retraso")["expires_at"] == before_p


def test_omit_expired_hides_an_expired_row_before_any_sweep(store, db):
    put_memory(store, ("proveedores", "P1"), "aviso-promocion", {"texto": "flash"}, valid_for_minutes=0.01)
    deadline = time.monotonic() + 10  # until it has expired on the database's clock (a fixed 0.8 s before)
    while db.fetch_one("SELECT count(*) AS n FROM store WHERE key = 'aviso-promocion' AND expires_at >= now()")["n"]:
        assert time.monotonic() < deadline, "the document did not expire"
        time.sleep(0.01)
    assert get_memory(store, ("proveedores", "P1"), "aviso-promocion") is None
    assert search_memory(store, ("proveedores", "P1")) == []
    # Still physically there: only the sweep job deletes it.
    assert db.fetch_one("SELECT count(*) AS n FROM store WHERE expires_at < now()")["n"] == 1


def test_validity_never_lengthens_the_policy(store, db):
    put_memory(store, ("proveedores", "P1"), "aviso-retraso", {"texto": "x"}, valid_for_minutes=10**9)
    assert row(db, "proveedores.P1", "aviso-retraso")["ttl_minutes"] == POLICIES["proveedores"].ttl_days * 1440
    with pytest.raises(ValueError):
        put_memory(store, ("proveedores", "P1"), "aviso-retraso", {"texto": "x"}, valid_for_minutes=0)


def test_in_memory_store_refuses_ttl():
    with pytest.raises(NotImplementedError):
        InMemoryStore().put(("clientes", "C9"), "pref-idioma", {"texto": "M"}, ttl=POLICIES["clientes"].ttl_minutes)


@pytest.mark.parametrize("bad", ["", "   ", " C9", "C.9", "C9\x00", "x" * 10_000, None, 9])
def test_bad_ids_are_refused_and_change_nothing(store, db, bad):
    with pytest.raises(InvalidIdentifier):
        put_memory(store, ("clientes", bad), "pref-idioma", {"texto": "M"})
    with pytest.raises(InvalidIdentifier):
        validate_label(bad)
    assert (
        db.fetch_one("SELECT (SELECT count(*) FROM store) + (SELECT count(*) FROM core_memory_writes) AS n")["n"] == 0
    )


def test_metacharacters_are_plain_labels(store, db):
    for ident in ("C_9", "C%", "O'Brien", 'C"9'):
        put_memory(store, ("clientes", ident), "pref-idioma", {"texto": "M"})
    assert get_memory(store, ("clientes", "C_9"), "pref-idioma") is not None
    assert [i.namespace for i in search_memory(store, ("clientes", "C_9"))] == [("clientes", "C_9")]
    assert [i.namespace for i in search_memory(store, ("clientes", "C%"))] == [("clientes", "C%")]


def test_unknown_root_is_refused(store, db):
    with pytest.raises(UnknownNamespace):
        put_memory(store, ("pedidos", "X"), "k", {"texto": "x"})
    assert db.fetch_one("SELECT count(*) AS n FROM store")["n"] == 0


def test_migrations_run_twice_and_concurrently(create_database):
    dsn = create_database(migrated=False)
    errors: list[BaseException] = []
    applied: list[list[str]] = []

    def run():
        try:
            applied.append(migrate(dsn, DIMS))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(len(a) for a in applied)[-1] >= 1 and sum(len(a) for a in applied) == len(max(applied, key=len))
    assert migrate(dsn, DIMS) == []
    with psycopg.connect(dsn) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM core_schema_migrations ORDER BY version")]
    assert versions == sorted(set(versions)) and versions[0] == 1


def test_dims_mismatch_is_a_clear_startup_error(db):
    with pytest.raises(EmbeddingDimsMismatch, match=r"vector\(64\)"):
        migrate(db.dsn, 1536)


@pytest.mark.slow  # waits out the store pool's timeout
def test_agents_keep_answering_when_the_store_is_down():
    """The store's database unreachable (a refused port): the prompt goes without preferences, the
    conversation log row is skipped, a memory tool answers that memory is unavailable, and the
    turn still ends with the model's reply, checkpointed by a healthy saver."""
    from langgraph.checkpoint.memory import InMemorySaver

    from core.agents.retail import MEMORY_DOWN
    from core.db import make_pool

    dead = make_pool("postgresql://postgres@127.0.0.1:1/agentes?connect_timeout=1", name="dead-store", timeout=0.5)
    try:
        agent = build_agent(
            "atencion-cliente",
            ScriptedChatModel(),
            store=build_store(dead, OfflineHashEmbeddings(DIMS), DIMS),
            checkpointer=InMemorySaver(),
        )
        result = run_turn(agent, ContextoCliente("C9"), "t-down", "Prefiero que me atendáis en catalán.")
        tool_msgs = [m for m in result["messages"] if isinstance(m, ToolMessage)]
        assert [(m.content, m.status) for m in tool_msgs] == [(MEMORY_DOWN, "error")]
        assert result["messages"][-1].content.startswith("Hecho.")
    finally:
        dead.close()
