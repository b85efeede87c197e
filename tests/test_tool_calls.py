"""Tool calls extracted from checkpoint history (core/history/tool_calls.py): equal to what the
canonical SQL views decode live, incremental, idempotent, right for an agent built without `core`,
and the Preferences page reads them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Literal

import pytest
from apptools import as_int, frame, metric
from conftest import DIMS
from langchain.agents import create_agent
from langchain.tools import ToolRuntime, tool
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.store.postgres import PostgresStore
from streamlit.testing.v1 import AppTest

from agent_memory_runtime import clock
from core.agents.retail import ContextoCliente, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.history import tool_calls
from core.memory import preferences
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import TIPOS, build_store

# What the canonical views decode live, one row per tool call: the ground truth of every test here.
LIVE_CALLS = """
SELECT m.thread_id, call ->> 'name' AS tool, call -> 'args' AS args
FROM core_checkpoint_messages_view m CROSS JOIN LATERAL jsonb_array_elements(m.tool_calls) AS call
WHERE m.kind = 'ai' AND m.tool_calls IS NOT NULL"""
EXTRACTED = "SELECT thread_id, tool, args FROM core_tool_calls"


def as_multiset(rows):
    return sorted((r["thread_id"], r["tool"], repr(sorted((r["args"] or {}).items()))) for r in rows)


def our_agent(db):
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    return build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(db.pool))


SCRIPT = [
    ("C1", "cliente-C1-1", "Prefiero recoger mis pedidos en la tienda Diagonal."),
    ("C1", "cliente-C1-1", "Quiero recoger un pedido, ¿qué me propones?"),
    ("C2", "cliente-C2-1", "Por favor, contactadme siempre por SMS."),
    ("C2", "cliente-C2-1", "Las entregas mejor en la franja de tarde."),
    ("C3", "cliente-C3-1", "Prefiero que me atendáis en gallego."),
    ("C3", "cliente-C3-2", "Hola, quería saber el estado de mi pedido."),
]


def test_demo_agents_write_the_articles_closed_literal(db):
    assert TIPOS == ("recogida", "contacto", "idioma", "horario")
    agent = our_agent(db)
    for cid, thread, text in SCRIPT:
        run_turn(agent, ContextoCliente(cid), thread, text)
    run_turn(agent, ContextoCliente("C4"), "cliente-C4-1", "Mi talla es la M.")  # fits no tipo: not saved
    keys = {
        (r["prefix"], r["key"], r["tipo"]) for r in db.fetch("SELECT prefix, key, value->>'tipo' AS tipo FROM store")
    }
    assert keys == {
        ("clientes.C1", "pref-recogida", "recogida"),
        ("clientes.C2", "pref-contacto", "contacto"),
        ("clientes.C2", "pref-horario", "horario"),
        ("clientes.C3", "pref-idioma", "idioma"),
    }
    texto = db.fetch_one("SELECT value->>'texto' AS t FROM store WHERE key = 'pref-idioma'")["t"]
    assert texto == "idioma: gallego"  # the article's f"{tipo}: {valor}"


def test_extraction_equals_the_live_views_and_is_idempotent(db):
    agent = our_agent(db)
    for cid, thread, text in SCRIPT:
        run_turn(agent, ContextoCliente(cid), thread, text)
    first = tool_calls.extract(db)
    live = db.fetch(LIVE_CALLS)
    assert len(live) == 5 and first.calls == 5 and first.caught_up
    assert as_multiset(db.fetch(EXTRACTED)) == as_multiset(live)
    # our exact fast path agrees with the checkpoints
    logged = db.fetch_one("SELECT count(*) AS n FROM core_memory_writes WHERE key LIKE 'pref-%%'")["n"]
    assert logged == sum(r["tool"] == "recordar_preferencia" for r in live) == 4
    # re-reading everything (a look-back over the whole history) adds nothing
    again = tool_calls.extract(db, lookback=timedelta(days=3650))
    assert again.checkpoints == first.checkpoints and again.calls == 0 and again.thread_days == 0
    assert db.fetch_one("SELECT count(*) AS n FROM core_tool_calls")["n"] == 5
    # thread-days: one per thread with a human message, customer from the metadata our agents add
    days = db.fetch("SELECT thread_id, cliente_id, day FROM core_thread_days ORDER BY thread_id")
    assert [(d["thread_id"], d["cliente_id"]) for d in days] == [
        ("cliente-C1-1", "C1"),
        ("cliente-C2-1", "C2"),
        ("cliente-C3-1", "C3"),
        ("cliente-C3-2", "C3"),
    ]
    row = db.fetch_one("SELECT clock, cliente_id, agent, args FROM core_tool_calls WHERE thread_id = 'cliente-C3-1'")
    assert row == {
        "clock": "checkpoint",
        "cliente_id": "C3",
        "agent": "atencion-cliente",
        "args": {"tipo": "idioma", "valor": "gallego"},
    }


def test_incremental_bounded_steps_and_watermark(db):
    agent = our_agent(db)
    for cid, thread, text in SCRIPT[:3]:
        run_turn(agent, ContextoCliente(cid), thread, text)
    assert tool_calls.extract(db).calls == 3
    mark = tool_calls.watermark(db)
    for cid, thread, text in SCRIPT[3:]:
        run_turn(agent, ContextoCliente(cid), thread, text)
    behind = tool_calls.checkpoints_behind(db)
    assert behind > 2
    step = tool_calls.catch_up(db, max_checkpoints=2)  # bounded: what a page view may do
    assert step.checkpoints == 2 and step.behind == behind - 2 and not step.caught_up
    assert (tool_calls.watermark(db).ts, tool_calls.watermark(db).checkpoint_id) > (mark.ts, mark.checkpoint_id)
    rest = tool_calls.extract(db, batch=1)
    assert rest.caught_up and rest.batches >= behind - 2
    assert as_multiset(db.fetch(EXTRACTED)) == as_multiset(db.fetch(LIVE_CALLS))


def test_a_late_write_is_found_by_the_sweeps_lookback(db):
    agent = our_agent(db)
    run_turn(agent, ContextoCliente("C1"), "cliente-C1-1", SCRIPT[0][2])
    tool_calls.extract(db)
    run_turn(agent, ContextoCliente("C1"), "cliente-C1-2", "Hola, quería saber el estado de mi pedido.")
    tool_calls.extract(db)  # the watermark is now past the first thread's checkpoints
    # a write landing late on an old checkpoint (a long step, a resync): same blob under a new task
    db.execute("""INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel,
    type, blob, task_path)
                  SELECT thread_id, checkpoint_ns, checkpoint_id, 'late-task', idx, channel, type, blob, task_path
                  FROM checkpoint_writes w WHERE thread_id = 'cliente-C1-1'
                    AND position('recordar_preferencia'::bytea IN blob) > 0 AND channel = 'messages'""")
    assert len(db.fetch(LIVE_CALLS)) == 2
    assert tool_calls.catch_up(db).calls == 0  # forward only: not seen
    assert tool_calls.sweep_step(db).calls == 1  # the look-back finds it
    assert as_multiset(db.fetch(EXTRACTED)) == as_multiset(db.fetch(LIVE_CALLS))


def test_demo_replayed_time_dates_the_calls(db):
    agent = our_agent(db)
    replayed = datetime(2026, 11, 20, 10, 30, tzinfo=UTC)
    with clock.simulated(replayed):
        run_turn(agent, ContextoCliente("C1"), "cliente-C1-1", SCRIPT[0][2])
    run_turn(agent, ContextoCliente("C2"), "cliente-C2-1", SCRIPT[2][2])
    tool_calls.extract(db)
    rows = {r["thread_id"]: r for r in db.fetch("SELECT thread_id, ts, clock FROM core_tool_calls")}
    assert rows["cliente-C1-1"]["clock"] == "replayed" and rows["cliente-C1-1"]["ts"] == replayed
    real = db.fetch_one(
        "SELECT max(core_try_timestamptz(checkpoint->>'ts')) AS ts FROM checkpoints WHERE thread_id = 'cliente-C2-1'"
    )["ts"]
    assert rows["cliente-C2-1"]["clock"] == "checkpoint" and rows["cliente-C2-1"]["ts"] <= real
    assert db.fetch_one("SELECT day FROM core_thread_days WHERE thread_id = 'cliente-C1-1'")["day"] == date(
        2026, 11, 20
    )
    assert preferences.clocks(db, date(2026, 11, 1), date.today()) == {"checkpoint": 1, "replayed": 1}


def test_rows_of_deleted_threads_are_pruned_by_the_sweep_step(db):
    agent = our_agent(db)
    for cid, thread, text in SCRIPT:
        run_turn(agent, ContextoCliente(cid), thread, text)
    tool_calls.extract(db)
    derived = tool_calls.DERIVED_PER_THREAD
    held = {
        table: db.fetch_one(f"SELECT count(*) AS n FROM {table} WHERE thread_id = 'cliente-C2-1'")["n"]
        for table in derived
    }
    # two calls, one thread-day, its summary, its AI messages' usage and its per-model usage total
    assert held["core_tool_calls"] == 2 and held["core_thread_days"] == 1 and held["core_thread_summary"] == 1
    assert held["core_message_usage"] > 0 and held["core_usage_threads"] == 1
    PostgresSaver(db.pool).delete_thread("cliente-C2-1")
    result = tool_calls.sweep_step(db)
    assert result.pruned == sum(held.values())
    for table in derived:
        assert db.fetch_one(f"SELECT count(*) AS n FROM {table} WHERE thread_id = 'cliente-C2-1'")["n"] == 0, table
    assert as_multiset(db.fetch(EXTRACTED)) == as_multiset(db.fetch(LIVE_CALLS))


# --- an agent built exactly as the memory article shows: stock store and saver, no `core` -----
# (until tests/foreign_agents.py lands on main; then these use it)


class ArticleModel(FakeMessagesListChatModel):
    def bind_tools(self, tools, **kw):
        return self


@dataclass
class ContextoArticulo:  # the article's ContextoCliente: the customer id only here, never in metadata
    cliente_id: str
    tienda: str


@tool("recordar_preferencia")
def recordar_preferencia_articulo(
    tipo: Literal["recogida", "contacto", "idioma", "horario"], valor: str, runtime: ToolRuntime[ContextoArticulo]
) -> dict:
    """Guarda una preferencia que el cliente ha declarado explícitamente en esta conversación."""
    ns = ("clientes", runtime.context.cliente_id)
    runtime.store.put(
        ns,
        f"pref-{tipo}",
        {
            "texto": f"{tipo}: {valor}",
            "tipo": tipo,
            "valor": valor,
            "origen": "cliente",
            "hilo": runtime.config["configurable"]["thread_id"],
        },
    )
    return {"ok": True, "tipo": tipo}


def article_agent(db, responses):
    return create_agent(
        ArticleModel(responses=responses),
        tools=[recordar_preferencia_articulo],
        context_schema=ContextoArticulo,
        checkpointer=PostgresSaver(db.pool),
        store=PostgresStore(db.pool),
    ), ContextoArticulo


def call(tipo, valor, n):
    return AIMessage(
        content="",
        tool_calls=[
            {
                "name": "recordar_preferencia",
                "args": {"tipo": tipo, "valor": valor},
                "id": f"call-{n}",
                "type": "tool_call",
            }
        ],
    )


def test_article_agents_preferences_page_equals_the_checkpoints(db, app_env):
    conversations = [
        ("C9", "conv-1", "recogida", "T002"),
        ("C9", "conv-2", None, None),
        ("C10", "conv-3", "contacto", "SMS"),
        ("C10", "conv-4", "horario", "tardes"),
        ("C11", "conv-5", None, None),
    ]
    for n, (cid, thread, tipo, valor) in enumerate(conversations):
        responses = ([call(tipo, valor, n)] if tipo else []) + [AIMessage(content="De acuerdo.")]
        agent, Ctx = article_agent(db, responses)
        agent.invoke(
            {"messages": [{"role": "user", "content": "hola"}]},
            context=Ctx(cid, "T001"),
            config={"configurable": {"thread_id": thread}},
        )
    assert db.fetch_one("SELECT count(*) AS n FROM core_memory_writes")["n"] == 0  # our log sees nothing
    assert db.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE metadata ? 'cliente_id'")["n"] == 0
    live = db.fetch(LIVE_CALLS)
    assert len(live) == 3
    app_env(db.dsn)
    at = AppTest.from_file("../dashboard.py", default_timeout=60)
    at.run()
    at.switch_page("app_pages/preferences.py").run()  # the page itself extracts (bounded step)
    assert not at.exception
    assert as_int(metric(at, "Escrituras de preferencias")) == len(live) == 3
    assert as_int(metric(at, "Conversaciones")) == 5
    assert metric(at, "Escrituras por conversación") == "0,600"
    writers = frame(at, "thread_id", "tipos")
    assert sorted(writers["thread_id"]) == ["conv-1", "conv-3", "conv-4"]
    by_tipo = preferences.preference_by_tipo(db, date.today() - timedelta(days=29), date.today())
    assert dict(zip(by_tipo["tipo"], by_tipo["writes"], strict=True)) == {"recogida": 1, "contacto": 1, "horario": 1}
    assert any("Reloj" in c.value for c in at.caption)


def test_page_shows_behind_and_extract_now_catches_up(db, app_env, monkeypatch):
    agent = our_agent(db)
    for cid, thread, text in SCRIPT:
        run_turn(agent, ContextoCliente(cid), thread, text)
    monkeypatch.setattr(tool_calls, "PAGE_MAX_CHECKPOINTS", 3)
    monkeypatch.setattr(tool_calls.catch_up, "__defaults__", (3,))
    app_env(db.dsn)
    at = AppTest.from_file("../dashboard.py", default_timeout=60)
    at.run()
    at.switch_page("app_pages/preferences.py").run()
    assert not at.exception
    assert any("por detrás" in w.value for w in at.warning)
    at.button(key="preferences.extract").click().run()
    assert not at.exception
    assert not any("por detrás" in w.value for w in at.warning)
    assert as_int(metric(at, "Escrituras de preferencias")) == 4
    assert tool_calls.checkpoints_behind(db) == 0


@pytest.mark.parametrize("batch", [0, -1])
def test_bad_batch_is_refused(db, batch):
    with pytest.raises(ValueError):
        tool_calls.extract(db, batch=batch)


def test_a_read_only_role_sees_the_page_with_a_clear_warning(db, app_env):
    agent = our_agent(db)
    for cid, thread, text in SCRIPT:
        run_turn(agent, ContextoCliente(cid), thread, text)
    tool_calls.extract(db, max_checkpoints=3)  # partly extracted by the sweep earlier
    role = f"ro_{db.dsn.rsplit('/', 1)[-1].split('?')[0]}"[:60]
    db.execute(f'CREATE ROLE "{role}" LOGIN')
    db.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"')
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    ro_dsn = make_conninfo(db.dsn, user=role)
    assert conninfo_to_dict(ro_dsn)["user"] == role
    before = db.fetch_one("SELECT count(*) AS n FROM core_tool_calls")["n"]
    app_env(ro_dsn)
    at = AppTest.from_file("../dashboard.py", default_timeout=60)
    at.run()
    at.switch_page("app_pages/preferences.py").run()
    assert not at.exception
    assert any("no puede extraer" in w.value and "permission denied" in w.value for w in at.warning)
    assert db.fetch_one("SELECT count(*) AS n FROM core_tool_calls")["n"] == before
