"""The allowlisted serializer on the real embedded PostgreSQL: the real agents' checkpoints need
nothing outside the allowlist, and a foreign payload in `checkpoint_blobs` is refused loudly
without importing or calling anything (a sentinel file would show it ran)."""

from __future__ import annotations

import contextlib
import enum
import json
import sys

import ormsgpack
import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.serde import _msgpack as lg_msgpack
from langgraph.checkpoint.serde.event_hooks import register_serde_event_listener
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from agent_memory_runtime.guard import FailClosedGuard
from agent_memory_runtime.serde import ALLOWED_MSGPACK_MODULES, REFUSALS, SerializationRefused, make_serializer
from core.agents.retail import ContextoCliente, ContextoEmpleado, ContextoProveedor, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.db import make_pool
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store

DIMS = 64
CUSTOMER_TURNS = [
    "Prefiero recoger mis pedidos en la tienda Sierpes.",
    "¿Hay avisos sobre vaqueros?",
    "¿Qué preferencias tengo guardadas?",
    "Hola, quería saber el estado de mi pedido.",
]


def foreign_blob(sentinel_path: str) -> bytes:
    """A messages blob whose first element is a constructor ext calling os.system."""
    ext = ormsgpack.Ext(0, ormsgpack.packb(["os", "system", f"touch {sentinel_path}"]))
    return ormsgpack.packb([ext])


@pytest.fixture
def pool(db):
    pool = make_pool(db.dsn, name="test-serde")
    yield pool
    pool.close()


def _run_all_agents(saver, store) -> None:
    model = ScriptedChatModel()
    cliente = build_agent("atencion-cliente", model, store=store, checkpointer=saver)
    for text in CUSTOMER_TURNS:
        run_turn(cliente, ContextoCliente("C1"), "serde-c1", text)
    compras = build_agent("compras", model, store=store, checkpointer=saver)
    run_turn(
        compras, ContextoProveedor("P1"), "serde-p1", "aviso retraso (5 min): Los pedidos de vaqueros llegan tarde"
    )
    personal = build_agent("ajustes-personal", model, store=store, checkpointer=saver)
    run_turn(personal, ContextoEmpleado("E1"), "serde-e1", "ajuste idioma = es")
    # A HIGH tool denied by the guard leaves its denial (with the risk level) in the checkpoint.
    denied = build_agent("compras", model, store=store, checkpointer=saver, guard=FailClosedGuard(lambda: True))
    run_turn(denied, ContextoProveedor("P2"), "serde-p2", "aviso promocion: Segunda unidad a mitad de precio")


def test_real_agent_checkpoints_need_only_allowlisted_types(db, pool):
    saver = PostgresSaver(pool, serde=make_serializer())
    store = build_store(pool, OfflineHashEmbeddings(DIMS), DIMS)
    refusals_before = REFUSALS.total
    _run_all_agents(saver, store)

    # Re-read every stored payload with a permissive serializer and collect each type that is
    # not one of langgraph's built-in safe types: all of them must be in our allowlist.
    needed: set[tuple[str, str]] = set()
    unregister = register_serde_event_listener(
        lambda e: needed.add((e["module"], e["name"])) if e["kind"] == "msgpack_unregistered_allowed" else None
    )
    permissive = JsonPlusSerializer(allowed_msgpack_modules=True)
    try:
        with psycopg.connect(db.dsn) as conn:
            rows = conn.execute(
                "SELECT type, blob FROM checkpoint_blobs WHERE blob IS NOT NULL "
                "UNION ALL SELECT type, blob FROM checkpoint_writes"
            ).fetchall()
            for type_, blob in rows:
                permissive.loads_typed((type_, bytes(blob)))
    finally:
        unregister()
    assert len(rows) > 20
    assert needed <= set(ALLOWED_MSGPACK_MODULES), needed - set(ALLOWED_MSGPACK_MODULES)
    assert ("agent_memory_runtime.guard", "Risk") in needed
    # And with our serializer every checkpoint of every thread loads without a refusal.
    for thread in ("serde-c1", "serde-p1", "serde-e1", "serde-p2"):
        history = list(saver.list({"configurable": {"thread_id": thread}}))
        assert history and all(t.checkpoint["channel_values"] is not None for t in history)
    assert REFUSALS.total == refusals_before


@contextlib.contextmanager
def _class_under(cls: type, module: str):
    """The class as an older checkout named it: langgraph's encoder writes `type(obj).__module__`."""
    current = cls.__module__
    cls.__module__ = module
    try:
        yield
    finally:
        cls.__module__ = current


@pytest.mark.parametrize("old_module", ["core.guard", "core.checkpoints.guard"])
def test_payload_written_under_the_guards_old_name_loads_as_the_enum(old_module):
    # Checkpoints written before core/ was split name the enum `core.guard.Risk`, those written before the agents'
    # library `core.checkpoints.guard.Risk` (a denied tool call leaves it in its ToolMessage artifact). Written here
    # by langgraph's own encoder under that name; no module of that name exists any more, and none is imported.
    from langchain_core.messages import ToolMessage

    from agent_memory_runtime.guard import Risk

    denied = ToolMessage(content="denied", tool_call_id="call-1", artifact={"risk": Risk.HIGH})
    with _class_under(Risk, old_module):
        payload = JsonPlusSerializer().dumps_typed({"messages": [denied], "risk": Risk.CRITICAL})
    assert payload[0] == "msgpack" and payload[1].count(old_module.encode() + b"\xa4Risk") == 2
    assert b"agent_memory_runtime.guard" not in payload[1]
    loaded = make_serializer().loads_typed(payload)
    assert loaded["risk"] is Risk.CRITICAL
    assert loaded["messages"][0].artifact == {"risk": Risk.HIGH} and loaded["messages"][0].artifact["risk"] is Risk.HIGH
    assert loaded["messages"][0].content == "denied"
    assert old_module not in sys.modules


@pytest.mark.parametrize(
    ("module", "name"),
    [("core.guard", "FailClosedGuard"), ("core.checkpoints.guard", "Denial"), ("core.guardx", "Risk")],
)
def test_payload_beside_the_old_names_is_still_refused(module, name):
    # Only the (old module, name) pairs of the alias table resolve: another name under an old module, or the
    # enum under a module that never held it, is refused as any payload outside the allowlist is.
    from agent_memory_runtime.guard import Risk

    class Foreign(enum.StrEnum):
        HIGH = "HIGH"

    cls = Risk if name == "Risk" else Foreign
    Foreign.__name__ = name
    with _class_under(cls, module):
        payload = JsonPlusSerializer().dumps_typed({"risk": cls.HIGH})
    with pytest.raises(SerializationRefused, match=f"{module}.{name}"):
        make_serializer().loads_typed(payload)
    assert module not in sys.modules


def test_allowlist_entries_are_data_constructors_only():
    # Every entry is called on load: it must be a class (a constructor), never a function.
    import importlib

    for module, name in ALLOWED_MSGPACK_MODULES:
        assert isinstance(getattr(importlib.import_module(module), name), type), (module, name)
    assert not any(m in ("os", "subprocess", "builtins", "importlib") for m, _ in ALLOWED_MSGPACK_MODULES)


def test_serializer_is_strict_without_pickle():
    serde = make_serializer()
    assert serde.pickle_fallback is False
    assert serde._allowed_msgpack_modules is not True
    with pytest.raises(SerializationRefused, match="pickle"):
        serde.loads_typed(("pickle", b"\x80\x04K\x01."))


def test_foreign_blob_is_refused_and_never_runs(db, pool, tmp_path):
    saver = PostgresSaver(pool, serde=make_serializer())
    store = build_store(pool, OfflineHashEmbeddings(DIMS), DIMS)
    agent = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=saver)
    config = {"configurable": {"thread_id": "serde-tampered"}}
    run_turn(agent, ContextoCliente("C9"), "serde-tampered", CUSTOMER_TURNS[0])
    sentinel = tmp_path / "SENTINEL-ran"
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        updated = conn.execute(
            "UPDATE checkpoint_blobs SET blob = %s, type = 'msgpack' WHERE thread_id = %s AND channel = 'messages'",
            (foreign_blob(str(sentinel)), "serde-tampered"),
        ).rowcount
    assert updated >= 1
    before = REFUSALS.total

    with pytest.raises(SerializationRefused, match=r"os\.system is not in the serializer allowlist"):
        saver.get_tuple(config)
    with pytest.raises(SerializationRefused, match=r"os\.system"):
        agent.get_state(config)
    assert not sentinel.exists(), "the foreign callable ran"
    assert REFUSALS.total >= before + 2
    refused = [r for r in REFUSALS.pending() if r.qualified_name == "os.system"]
    assert refused and refused[-1].kind == "msgpack_blocked"


def test_unimported_module_is_not_imported(tmp_path):
    # `this` prints the Zen of Python when imported: it must stay out of sys.modules.
    assert "this" not in sys.modules
    payload = ormsgpack.packb({"x": ormsgpack.Ext(1, ormsgpack.packb(["this", "anything", [1, 2]]))})
    with pytest.raises(SerializationRefused, match=r"this\.anything"):
        make_serializer().loads_typed(("msgpack", payload))
    assert "this" not in sys.modules


def test_method_ext_and_old_json_constructors_are_refused():
    serde = make_serializer()
    method = ormsgpack.packb(ormsgpack.Ext(3, ormsgpack.packb(["os", "popen", "echo hi", "read"])))
    with pytest.raises(SerializationRefused, match=r"os\.popen\.read"):
        serde.loads_typed(("msgpack", method))
    legacy = json.dumps({"lc": 2, "type": "constructor", "id": ["subprocess", "getoutput"], "args": ["id"]})
    with pytest.raises(SerializationRefused, match=r"subprocess\.getoutput"):
        serde.loads_typed(("json", legacy.encode()))


def test_safe_and_allowlisted_types_round_trip():
    from datetime import UTC, datetime
    from uuid import uuid4

    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    serde = make_serializer()
    value = {
        "messages": [HumanMessage("hola"), AIMessage("¿qué tal?"), ToolMessage("ok", tool_call_id="c1")],
        "when": datetime(2026, 1, 2, tzinfo=UTC),
        "id": uuid4(),
        "tags": {"a", "b"},
    }
    assert serde.loads_typed(serde.dumps_typed(value)) == value


def test_langgraphs_own_safe_types_stay_allowed_alongside_ours():
    """Types only langgraph's safe set lists (not our allowlist) still load as themselves."""
    import ipaddress
    from zoneinfo import ZoneInfo

    from agent_memory_runtime.serde import ALLOWED_MSGPACK_MODULES

    value = {
        "net": ipaddress.IPv4Network("10.0.0.0/8"),
        "address": ipaddress.IPv6Address("::1"),
        "tz": ZoneInfo("Europe/Madrid"),
    }
    for obj in value.values():
        key = (type(obj).__module__, type(obj).__name__)
        assert key in lg_msgpack.SAFE_MSGPACK_TYPES and key not in set(ALLOWED_MSGPACK_MODULES), key
    serde = make_serializer()
    assert serde.loads_typed(serde.dumps_typed(value)) == value


def test_clone_from_with_msgpack_allowlist_still_refuses():
    serde = make_serializer()
    clone = serde.with_msgpack_allowlist([("core.agents", "ContextoCliente")])
    assert type(clone) is type(serde) and clone.refusals is serde.refusals
    payload = ormsgpack.packb(ormsgpack.Ext(0, ormsgpack.packb(["os", "system", "true"])))
    with pytest.raises(SerializationRefused):
        clone.loads_typed(("msgpack", payload))
