"""The dual saver's tests' graph, importable alone (no pytest, no conftest: what the agent and replica processes of
test_saver_durable and test_saver_replay import, each start costing them only LangGraph's import).

A plain `StateGraph` with an `operator.add` list channel, as a new user would write it: every turn appends its input
and the node's mark, so the head checkpoint of a thread lists every turn in order and a lost turn shows at once."""

from __future__ import annotations

import operator
from typing import Annotated, TypedDict

from langgraph.graph import END, START, StateGraph


class Turns(TypedDict):
    log: Annotated[list, operator.add]


def graph(saver):
    builder = StateGraph(Turns)
    builder.add_node("node", lambda state: {"log": ["node"]})
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    return builder.compile(checkpointer=saver)


def turn(app, thread: str, text: str) -> list:
    return app.invoke({"log": [text]}, {"configurable": {"thread_id": thread}})["log"]
