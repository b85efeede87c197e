"""The fail-closed guard: declared risks, denial while degraded, and the saver's live state read at
every tool call (a run that starts healthy and degrades before its tool call is denied)."""

from __future__ import annotations

import asyncio

from langchain.agents.middleware import AgentMiddleware
from langchain.tools import ToolRuntime, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt.tool_node import ToolCallRequest

from agent_memory_runtime.dual_saver import DualCheckpointSaver
from agent_memory_runtime.guard import TOOL_RISKS, FailClosedGuard, GuardDenial, Risk, declare_risk, risk_of
from agent_memory_runtime.serde import make_serializer
from core.agents.retail import AGENTS, ContextoCliente, ContextoProveedor, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.history.replica_health import denials, episodes

EXPECTED = {
    "recordar_preferencia": Risk.LOW,
    "preferencias": Risk.READ_ONLY,
    "avisos_proveedor": Risk.READ_ONLY,
    "proponer_entrega": Risk.LOW,
    "publicar_aviso": Risk.HIGH,
    "guardar_ajuste": Risk.LOW,
    "ajuste": Risk.READ_ONLY,
}


@tool
def herramienta_sin_declarar(texto: str) -> str:
    """A tool nobody declared a risk for."""
    return texto


def request_for(tool_obj, context, thread_id="t-guard") -> ToolCallRequest:
    call = {"name": tool_obj.name, "args": {}, "id": "call-guard-1", "type": "tool_call"}
    runtime = ToolRuntime(
        state={},
        context=context,
        config={"configurable": {"thread_id": thread_id}},
        stream_writer=lambda _: None,
        tool_call_id="call-guard-1",
        store=None,
    )
    return ToolCallRequest(tool_call=call, tool=tool_obj, state={}, runtime=runtime)


def test_every_agent_tool_declares_its_risk():
    for _, tools, _ in AGENTS.values():
        for t in tools:
            assert t.metadata and t.metadata.get("risk") == EXPECTED[t.name].value, t.name
            assert risk_of(t, t.name) is EXPECTED[t.name]
    assert {k: TOOL_RISKS[k] for k in EXPECTED} == EXPECTED


def test_undeclared_or_garbage_risk_counts_as_high():
    assert risk_of(herramienta_sin_declarar, herramienta_sin_declarar.name) is Risk.HIGH
    assert risk_of(None, "no-such-tool") is Risk.HIGH

    @tool
    def mal_declarada() -> str:
        """Declares a risk level that does not exist."""
        return ""

    mal_declarada.metadata = {"risk": "MEDIUM"}
    assert risk_of(mal_declarada, "mal_declarada") is Risk.HIGH
    assert declare_risk(mal_declarada, Risk.CRITICAL) is mal_declarada
    assert risk_of(mal_declarada, "mal_declarada") is Risk.CRITICAL and Risk.CRITICAL.denied_while_degraded


def test_guard_denies_high_and_critical_only_while_degraded():
    from core.agents.retail import preferencias, publicar_aviso, recordar_preferencia

    state = {"degraded": True}
    guard = FailClosedGuard(lambda: state["degraded"])
    cliente = ContextoCliente("C42")

    denied = guard.check(request_for(herramienta_sin_declarar, cliente, "cliente-C42-1"))
    assert denied is not None and denied.status == "error" and denied.tool_call_id == "call-guard-1"
    assert "degradada" in denied.content and "HIGH" in denied.content and "herramienta_sin_declarar" in denied.content
    record = denied.artifact["guard_denial"]
    assert isinstance(record, GuardDenial) and record.customer_id == "C42" and record.thread_id == "cliente-C42-1"
    assert (
        guard.check(request_for(publicar_aviso, ContextoProveedor("P1"))).artifact["guard_denial"].customer_id is None
    )
    assert guard.check(request_for(recordar_preferencia, cliente)) is None  # LOW runs
    assert guard.check(request_for(preferencias, cliente)) is None  # READ_ONLY runs
    state["degraded"] = False
    assert guard.check(request_for(herramienta_sin_declarar, cliente)) is None  # healthy: everything runs
    assert [d.tool for d in guard.denials] == ["herramienta_sin_declarar", "publicar_aviso"]


def test_denial_survives_the_checkpoint_round_trip():
    guard = FailClosedGuard(lambda: True)
    agent = build_agent(
        "compras", ScriptedChatModel(), store=None, guard=guard, checkpointer=InMemorySaver(serde=make_serializer())
    )
    run_turn(
        agent, ContextoProveedor("P3"), "compras-P3-promocion", "aviso promocion: Segunda unidad a mitad de precio"
    )
    state = agent.get_state({"configurable": {"thread_id": "compras-P3-promocion"}})
    tool_msg = next(m for m in state.values["messages"] if m.type == "tool")
    assert tool_msg.status == "error"
    assert tool_msg.artifact["guard_denial"]["risk"] is Risk.HIGH  # rebuilt through the allowlist


class DegradeAfterModel(AgentMiddleware):
    """Moves the real saver to degraded between the model's tool call and the tool node."""

    def __init__(self, saver: DualCheckpointSaver):
        super().__init__()
        self.saver = saver

    def after_model(self, state, runtime):
        if state["messages"][-1].tool_calls:
            self.saver._degrade("test: PostgreSQL lost between the model call and the tool call")
        return None


def test_guard_reads_live_state_at_the_tool_call(db):
    """The run starts healthy; the saver degrades before the tool call; the call is denied.

    The saver's monitor starts only afterwards, so the recovery cannot race the tool call.
    """
    from langchain.agents import create_agent

    from core.agents.retail import publicar_aviso

    saver = DualCheckpointSaver(db.dsn, heartbeat_interval=0.3, replica_id="guard-live", start=False)
    try:
        guard = FailClosedGuard(saver)
        live = create_agent(
            ScriptedChatModel(),
            tools=[publicar_aviso],
            middleware=[DegradeAfterModel(saver), guard],
            context_schema=ContextoProveedor,
            checkpointer=saver,
        )
        assert not saver.degraded
        result = run_turn(live, ContextoProveedor("P5"), "compras-P5-retraso", "aviso retraso: Llega tarde")
        tool_msg = next(m for m in result["messages"] if m.type == "tool")
        assert tool_msg.status == "error" and "degradada" in tool_msg.content
        saver.start()
        assert saver.wait_for("healthy", 10)  # PostgreSQL was fine all along: the probe brings it back
        # Healthy again: the same kind of call runs (store-less, so it returns "").
        agent = build_agent("compras", ScriptedChatModel(), store=None, checkpointer=saver, guard=guard)
        ok = run_turn(agent, ContextoProveedor("P5"), "compras-P5-retraso-2", "aviso retraso: Llega tarde")
        assert next(m for m in ok["messages"] if m.type == "tool").status != "error"
    finally:
        saver.close()
    den = denials(db)
    assert list(den["tool"]) == ["publicar_aviso"] and den.iloc[0]["thread_id"] == "compras-P5-retraso"
    ep = episodes(db)
    assert len(ep) == 1 and ep.iloc[0]["denials"][0]["tool"] == "publicar_aviso"
    # The whole run, denied call included, is in PostgreSQL after the resync.
    assert db.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE thread_id = 'compras-P5-retraso'")["n"] >= 4


def test_async_tool_calls_are_guarded_too():
    guard = FailClosedGuard(lambda: True)
    agent = build_agent("compras", ScriptedChatModel(), store=None, guard=guard)
    result = asyncio.run(
        agent.ainvoke(
            {"messages": [{"role": "user", "content": "aviso retraso: Llega tarde"}]}, context=ContextoProveedor("P6")
        )
    )
    assert next(m for m in result["messages"] if m.type == "tool").status == "error"
    assert [d.tool for d in guard.denials] == ["publicar_aviso"]


def test_build_agent_adds_the_guard_for_a_dual_saver(db):
    """No guard passed: build_agent wires one on the dual saver it is given."""
    saver = DualCheckpointSaver(db.dsn, replica_id="build-agent", start=False)
    try:
        agent = build_agent("compras", ScriptedChatModel(), store=None, checkpointer=saver)
        saver._degrade("test: forced before the run")
        result = run_turn(agent, ContextoProveedor("P8"), "compras-P8-retraso", "aviso retraso: Llega tarde")
        assert next(m for m in result["messages"] if m.type == "tool").status == "error"
        assert saver.status()["denials_total"] == 1
        saver.start()
        assert saver.wait_for("healthy", 10)
    finally:
        saver.close()
