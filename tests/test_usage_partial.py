"""Issue 43, suspected: a thread where only some AI messages carry `usage_metadata` was shown with the tokens of
those only and no note. A real graph writes two AI messages with usage and two without; the extraction keeps both
kinds, usage.py says how many are without, and the Checkpoints page's Tokens and cost view and the thread's line say
"partial" (es and en)."""

from __future__ import annotations

from datetime import UTC, datetime

from apptools import frame
from langchain_core.messages import AIMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from streamlit.testing.v1 import AppTest

from core.history import tool_calls, usage

APP = "../dashboard.py"
PAGE = "app_pages/checkpoints.py"
THREAD = "conv-parcial"


def _reply(state: MessagesState) -> dict:
    turn = sum(1 for m in state["messages"] if m.type == "human")
    msg = AIMessage(content=f"respuesta {turn}")
    if turn % 2:  # turns 1 and 3 carry usage, 2 and 4 do not (a provider that reports it only sometimes)
        msg.usage_metadata = {"input_tokens": 100, "output_tokens": 10, "total_tokens": 110}
        msg.response_metadata = {"model_name": "gpt-4o-mini"}
    return {"messages": [msg]}


def _write(db) -> None:
    graph = StateGraph(MessagesState)
    graph.add_node("reply", _reply)
    graph.add_edge(START, "reply")
    graph.add_edge("reply", END)
    app = graph.compile(checkpointer=PostgresSaver(db.pool))
    for turn in range(1, 5):
        app.invoke({"messages": [("user", f"pregunta {turn}")]}, {"configurable": {"thread_id": THREAD}})
    tool_calls.extract(db)


def _open(db, app_env, query: dict) -> AppTest:
    app_env(db.dsn)
    at = AppTest.from_file(APP, default_timeout=60)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    at.switch_page(PAGE).run()
    assert not at.exception
    return at


def test_a_thread_with_some_messages_without_usage_is_said_partial(db, app_env):
    _write(db)
    rows = usage.thread_usage(db, THREAD, ())
    assert (int(rows["input_tokens"].sum()), int(rows["without_usage"].iloc[0])) == (200, 2)
    today = datetime.now(UTC).date()
    listed = usage.usage_by_thread(db, today, today, ()).set_index("thread_id")
    assert listed.loc[THREAD, "without_usage"] == 2 and listed.loc[THREAD, "input_tokens"] == 200
    tool_calls.extract(db, lookback=tool_calls.SWEEP_LOOKBACK)  # a re-read adds nothing
    assert int(usage.thread_usage(db, THREAD, ())["without_usage"].iloc[0]) == 2

    at = _open(db, app_env, {"view": "cost"})
    per_thread = frame(at, "thread_id", "cost_usd").set_index("thread_id")
    assert "Parcial: 2 mensajes de IA no traen datos de uso" in per_thread.loc[THREAD, "note"]
    at = _open(db, app_env, {"thread": THREAD})
    assert any("Parcial: 2 mensajes de IA" in c.value for c in at.caption)
    at = _open(db, app_env, {"thread": THREAD, "lang": "en"})
    assert any("Partial: 2 AI messages carry no usage data" in c.value for c in at.caption)
