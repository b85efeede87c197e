"""Foreign payloads visible in SQL (migration 021): a checkpoint payload naming a callable outside the
serializer's allowlist is marked refused by the SQL decoder, with the allowlist from one source; the
Checkpoints page marks that step and message and shows the rest of the conversation; the Degradation
page counts what SQL found next to the serializer's own refusals."""

from __future__ import annotations

import ormsgpack
import pytest
from apptools import as_int, frame, metric
from conftest import DIMS, start_streamlit, stop_streamlit
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.serde import _msgpack as lg_msgpack
from playwright.sync_api import expect
from streamlit.testing.v1 import AppTest

from agent_memory_runtime import serde
from agent_memory_runtime.serde import SerializationRefused, make_serializer
from core.agents.retail import ContextoCliente, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.db import Database
from core.history import tool_calls
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store
from core.migrate import migrate
from ui.tables import EMPTY

APP = "../dashboard.py"
THREAD = "cliente-C7-1"
TURNS = [
    "Hola, quería saber el estado de mi pedido.",
    "Prefiero recoger mis pedidos en la tienda Sierpes.",
    "¿Puedo cambiar una prenda sin ticket?",
]
EVIL = ormsgpack.packb([ormsgpack.Ext(0, ormsgpack.packb(["os", "system", "touch /tmp/pwned-by-checkpoint"]))])


def table(db) -> set[tuple]:
    return {
        (r["module"], r["name"], r["method"], r["source"])
        for r in db.fetch("SELECT module, name, method, source FROM core_serde_allowlist")
    }


def test_allowlist_table_is_the_serializers(db):
    rows = table(db)
    assert rows == set(serde.allowlist_rows())  # fails the moment the two diverge
    assert {(m, n) for m, n, meth, _ in rows if not meth} == set(serde.ALLOWED_MSGPACK_MODULES) | set(
        lg_msgpack.SAFE_MSGPACK_TYPES
    ) | set(serde.RENAMED_MSGPACK_TYPES)
    # an old type name is in the table (the SQL decoder does not mark it refused) as what the serializer loads
    assert {(m, n) for m, n, _, source in rows if source == "renamed"} == set(serde.RENAMED_MSGPACK_TYPES)
    for module, name in serde.RENAMED_MSGPACK_TYPES:
        old_name = ormsgpack.packb(ormsgpack.Ext(0, ormsgpack.packb([module, name, "HIGH"])))
        decoded = db.fetch_one("SELECT core_msgpack_to_json_text(%s) AS j", (old_name,))["j"]
        assert f'"{module}.{name}"' in decoded and "refused" not in decoded, decoded
    assert "refused" in db.fetch_one("SELECT core_msgpack_to_json_text(%s) AS j", (EVIL,))["j"]
    assert {(m, n, meth) for m, n, meth, _ in rows if meth} == set(lg_msgpack.SAFE_MSGPACK_METHODS)
    the_serializer = make_serializer()
    assert all(the_serializer.is_allowed(m, n) for m, n, meth, _ in rows if not meth)
    # a stale or tampered table is rewritten from the serializer on every migrate
    db.execute("INSERT INTO core_serde_allowlist VALUES ('os', 'system', '', 'core')")
    db.execute("DELETE FROM core_serde_allowlist WHERE name = 'AIMessage'")
    assert table(db) != set(serde.allowlist_rows())
    migrate(db.dsn, DIMS)
    assert table(db) == set(serde.allowlist_rows())


@pytest.fixture
def tampered(db):
    """A customer thread written by the real agents, then one AI message write replaced by a blob naming os.system."""
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    agent = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(db.pool))
    for text in TURNS:
        run_turn(agent, ContextoCliente("C7"), THREAD, text)
    target = db.fetch_one(
        "SELECT checkpoint_id, task_id, idx FROM core_checkpoint_writes_view WHERE thread_id = %s "
        "AND message_kind = 'ai' AND tool_name = 'recordar_preferencia'",
        (THREAD,),
    )
    db.execute(
        "UPDATE checkpoint_writes SET blob = %s WHERE thread_id = %s AND checkpoint_id = %s AND task_id = %s "
        "AND idx = %s",
        (EVIL, THREAD, target["checkpoint_id"], target["task_id"], target["idx"]),
    )
    return db, target


def test_the_views_mark_the_refused_type_and_agents_refuse_the_thread(tampered):
    db, target = tampered
    rows = db.fetch(
        "SELECT checkpoint_id, task_id, refused_type, undecodable, payload FROM core_checkpoint_writes_view "
        "WHERE thread_id = %s",
        (THREAD,),
    )
    refused = [r for r in rows if r["refused_type"]]
    assert [(r["checkpoint_id"], r["task_id"], r["refused_type"]) for r in refused] == [
        (target["checkpoint_id"], target["task_id"], "os.system")
    ]
    assert refused[0]["undecodable"] is None
    assert refused[0]["payload"] == [{"type": "os.system", "value": "touch /tmp/pwned-by-checkpoint", "refused": True}]
    # every other write of the thread decodes as before, none marked
    assert len(rows) > 5 and all(r["refused_type"] is None for r in rows if r is not refused[0])
    kinds = [
        r["kind"] for r in db.fetch("SELECT kind FROM core_checkpoint_messages_view WHERE thread_id = %s", (THREAD,))
    ]
    assert kinds.count("human") == 3
    # the serializer refuses exactly what the view marks
    saver = PostgresSaver(db.pool, serde=make_serializer())
    with pytest.raises(SerializationRefused, match="os.system"):
        saver.get_tuple(
            {"configurable": {"thread_id": THREAD, "checkpoint_ns": "", "checkpoint_id": target["checkpoint_id"]}}
        )
    # a method call outside langgraph's safe methods is refused too, an allowed one is not
    method = ormsgpack.packb(ormsgpack.Ext(3, ormsgpack.packb(["datetime", "datetime", "2026-01-01", "fromisoformat"])))
    bad = ormsgpack.packb(ormsgpack.Ext(3, ormsgpack.packb(["datetime", "datetime", "x", "now"])))
    q = "SELECT core_refused_type(core_checkpoint_payload('msgpack', %s)) AS r"
    assert db.fetch_one(q, (method,))["r"] is None
    assert db.fetch_one(q, (bad,))["r"] == "datetime.datetime.now"


def open_checkpoints(db, app_env, thread):
    app_env(db.dsn)
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["thread"] = thread
    at.run()
    at.switch_page("app_pages/checkpoints.py").run()
    assert not at.exception
    return at


def test_checkpoints_page_marks_the_step_and_the_message_and_shows_the_rest(tampered, app_env):
    db, target = tampered
    at = open_checkpoints(db, app_env, THREAD)
    step = db.fetch_one(
        "SELECT (metadata->>'step')::int AS s FROM checkpoints WHERE thread_id = %s AND checkpoint_id = %s",
        (THREAD, target["checkpoint_id"]),
    )["s"]
    banner = [e.value for e in at.error if "serializador rechaza" in e.value]
    assert len(banner) == 1 and "`os.system`" in banner[0] and f"paso {step}" in banner[0]
    markers = [e.value for e in at.error if e.value.startswith("Mensaje rechazado")]
    assert len(markers) == 1 and "`os.system`" in markers[0] and "canal `messages`" in markers[0]
    # the rest of the conversation: every human turn, the tool's answer to the refused call's neighbours
    texts = " ".join(t.value for t in at.text)
    assert all(turn in texts for turn in TURNS)
    timeline = frame(at, "refused_writes", "checkpoint_id")
    assert timeline.loc[timeline["checkpoint_id"] == target["checkpoint_id"], "refused_writes"].tolist() == [
        "os.system"
    ]
    assert (timeline["refused_writes"] != EMPTY).sum() == 1  # ui.tables shows an empty cell as EMPTY


def test_degradation_page_counts_refused_payloads_found_in_sql(tampered, app_env):
    db, _ = tampered
    assert tool_calls.extract(db).refused == 1
    assert tool_calls.extract(db, lookback=tool_calls.SWEEP_LOOKBACK).refused == 0  # found once
    app_env(db.dsn)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("app_pages/degradation.py").run()
    assert not at.exception
    assert as_int(metric(at, "Rechazables en SQL")) == 1
    assert (
        as_int(metric(at, "Rechazos del serializador"))
        == db.fetch_one("SELECT count(*) AS n FROM core_serde_refusals")["n"]
    )
    found = frame(at, "refused_type", "thread_id")
    assert found[["refused_type", "kind", "channel", "thread_id"]].values.tolist() == [
        ["os.system", "write", "messages", THREAD]
    ]


@pytest.mark.browser
def test_browser_tampered_thread_shows_the_marker(page, create_database, screenshot):
    db = Database(create_database(prefix="tampered"))
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    agent = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(db.pool))
    for text in TURNS:
        run_turn(agent, ContextoCliente("C7"), THREAD, text)
    db.execute(
        "UPDATE checkpoint_writes SET blob = %s WHERE (thread_id, checkpoint_id, task_id, idx) = "
        "(SELECT thread_id, checkpoint_id, task_id, idx FROM core_checkpoint_writes_view WHERE thread_id = %s "
        " AND message_kind = 'ai' AND tool_name = 'recordar_preferencia')",
        (EVIL, THREAD),
    )
    proc, url = start_streamlit({"PG_AGENTES": db.dsn})
    try:
        page.goto(f"{url}/checkpoints?thread={THREAD}")
        expect(page.get_by_role("heading", name="Historial de checkpoints de un hilo")).to_be_visible(timeout=30_000)
        expect(page.get_by_text("serializador rechaza").first).to_be_visible(timeout=30_000)
        marker = page.get_by_test_id("stChatMessage").filter(has_text="Mensaje rechazado")
        expect(marker).to_have_count(1, timeout=15_000)
        expect(marker).to_contain_text("os.system")
        for turn in TURNS:
            expect(page.get_by_test_id("stChatMessage").filter(has_text=turn).first).to_be_visible()
        marker.scroll_into_view_if_needed()
        screenshot("checkpoints-refused-message")
    finally:
        stop_streamlit(proc)
