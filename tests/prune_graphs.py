"""Graphs for the prune proof (tests/test_prune.py): a subgraph that pauses on an interrupt, a DeltaChannel, and a
description of what langgraph's own `get_state()` returns, to compare before and after pruning."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.types import StateSnapshot, interrupt


class Log(TypedDict):
    log: Annotated[list, operator.add]


def _sub_ask(state: Log) -> dict:
    answer = interrupt({"pregunta": "¿confirmar?", "vistos": len(state["log"])})
    return {"log": [f"respuesta:{answer}"]}


def subgraph_with_interrupt(checkpointer):
    """Root `p` -> subgraph `child` (`s1`, then `ask`, which pauses on an interrupt) -> `fin`."""
    sub = StateGraph(Log)
    sub.add_node("s1", lambda s: {"log": ["s1"]})
    sub.add_node("ask", _sub_ask)
    sub.add_edge(START, "s1")
    sub.add_edge("s1", "ask")
    sub.add_edge("ask", END)
    root = StateGraph(Log)
    root.add_node("p", lambda s: {"log": ["p"]})
    root.add_node("child", sub.compile())
    root.add_node("fin", lambda s: {"log": ["fin"]})
    root.add_edge(START, "p")
    root.add_edge("p", "child")
    root.add_edge("child", "fin")
    root.add_edge("fin", END)
    return root.compile(checkpointer=checkpointer)


def _concat(state: list, batches: list) -> list:
    out = list(state)
    for batch in batches:
        out.extend(batch if isinstance(batch, list) else [batch])
    return out


class DeltaState(TypedDict):
    items: Annotated[list, DeltaChannel(_concat, snapshot_frequency=3)]
    n: int


def delta_graph(checkpointer, steps: int = 4):
    """A node looping `steps` times, each appending one item to a DeltaChannel (a snapshot every 3 updates)."""
    g = StateGraph(DeltaState)
    g.add_node("a", lambda s: {"items": [f"i{s['n']}"], "n": s["n"] + 1})
    g.add_edge(START, "a")
    g.add_conditional_edges("a", lambda s: END if s["n"] >= steps else "a")
    return g.compile(checkpointer=checkpointer)


def describe(snapshot: StateSnapshot) -> dict[str, Any]:
    """What a state snapshot says (values, next, interrupts, subgraph states), not where its parent is."""
    return {
        "values": snapshot.values,
        "next": snapshot.next,
        "checkpoint_id": snapshot.config["configurable"].get("checkpoint_id"),
        "tasks": [
            (
                t.name,
                [(i.value, i.id) for i in t.interrupts],
                describe(t.state) if isinstance(t.state, StateSnapshot) else None,
            )
            for t in snapshot.tasks
        ],
        "interrupts": [(i.value, i.id) for i in snapshot.interrupts],
    }
