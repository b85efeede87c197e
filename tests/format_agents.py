"""Threads written by langgraph's own classes in each storage format (issue 28): a DeltaChannel graph, an agent
whose saver has an EncryptedSerializer, a saver with a `pickle_fallback` serializer, and ShallowPostgresSaver."""

from __future__ import annotations

import warnings
from typing import Annotated, TypedDict

import psycopg
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import _messages_delta_reducer
from psycopg.rows import dict_row

AES_KEY = "clave-de-16-byte"  # 16 bytes, as LANGGRAPH_AES_KEY is read
OLD_AES_KEY = "clave-antigua-de-24-byte"


def conn_for(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)


def concat_reducer(state: list, writes: list) -> list:
    out = list(state)
    for w in writes:
        out.extend(w if isinstance(w, list) else [w])
    return out


class DeltaState(TypedDict):
    items: Annotated[list, DeltaChannel(concat_reducer, snapshot_frequency=3)]
    messages: Annotated[list, DeltaChannel(_messages_delta_reducer, snapshot_frequency=3)]


def _answer(state: DeltaState) -> dict:
    n = len(state["items"])
    update = {"items": [f"item-{n}"], "messages": [AIMessage(content=f"respuesta {n} para C77", id=f"ai-{n}")]}
    if n == 3:  # a RemoveMessage through the delta reducer
        update["messages"].append(RemoveMessage(id="ai-1"))
    return update


def delta_thread(dsn: str, thread_id: str, turns: int = 5) -> dict:
    """`turns` invocations of a DeltaChannel graph (snapshots every 3 updates) on a stock PostgresSaver;
    returns langgraph's own state at the latest checkpoint: {"items": [...], "messages": [(id, content)]}."""
    graph = StateGraph(DeltaState)
    graph.add_node("answer", _answer)
    graph.add_edge(START, "answer")
    graph.add_edge("answer", END)
    with conn_for(dsn) as conn:
        app = graph.compile(checkpointer=PostgresSaver(conn))
        config = {"configurable": {"thread_id": thread_id}}
        for i in range(turns):
            app.invoke({"items": [f"in-{i}"], "messages": [HumanMessage(content=f"hola {i}", id=f"h-{i}")]}, config)
        values = app.get_state(config).values
    return {"items": values["items"], "messages": [(m.id, m.content) for m in values["messages"]]}


def delta_state_at(dsn: str, thread_id: str, checkpoint_id: str) -> dict:
    """langgraph's own state of a DeltaChannel thread at one checkpoint."""
    graph = StateGraph(DeltaState)
    graph.add_node("answer", _answer)
    graph.add_edge(START, "answer")
    graph.add_edge("answer", END)
    with conn_for(dsn) as conn:
        app = graph.compile(checkpointer=PostgresSaver(conn))
        values = app.get_state({"configurable": {"thread_id": thread_id, "checkpoint_id": checkpoint_id}}).values
    return {"items": values.get("items", []), "messages": [(m.id, m.content) for m in values.get("messages", [])]}


def merge_reducer(state: dict, writes: list) -> dict:
    out = dict(state)
    for w in writes:
        out.update(w)
    return out


def unique_reducer(state: list, writes: list) -> list:
    """List-shaped like concatenation, but drops repeats: a dashboard must not take it for concatenation."""
    out = list(state)
    for w in writes:
        out.extend(x for x in w if x not in out)
    return out


class OtherDeltaState(TypedDict):
    counts: Annotated[dict, DeltaChannel(merge_reducer, dict, snapshot_frequency=3)]
    tags: Annotated[list, DeltaChannel(unique_reducer, snapshot_frequency=3)]


def _count(state: OtherDeltaState) -> dict:
    n = len(state["counts"])
    return {"counts": {f"k{n}": n}, "tags": ["C77", f"t{n % 2}"]}


def _other_graph() -> StateGraph:
    graph = StateGraph(OtherDeltaState)
    graph.add_node("count", _count)
    graph.add_edge(START, "count")
    graph.add_edge("count", END)
    return graph


def delta_other_thread(dsn: str, thread_id: str, turns: int = 4) -> None:
    """A DeltaChannel graph whose reducers a dashboard cannot know: a dict merge, and a list without repeats."""
    with conn_for(dsn) as conn:
        app = _other_graph().compile(checkpointer=PostgresSaver(conn))
        for i in range(turns):
            app.invoke({"counts": {f"in{i}": i}, "tags": ["C77"]}, {"configurable": {"thread_id": thread_id}})


def delta_other_state_at(dsn: str, thread_id: str, checkpoint_id: str) -> dict:
    with conn_for(dsn) as conn:
        app = _other_graph().compile(checkpointer=PostgresSaver(conn))
        return app.get_state({"configurable": {"thread_id": thread_id, "checkpoint_id": checkpoint_id}}).values


def encrypted_agent(dsn: str, thread_id: str, text: str, key: str = AES_KEY) -> None:
    """A chat agent (a StateGraph with add_messages) whose saver encrypts with EncryptedSerializer."""
    encrypted_agents(dsn, [(thread_id, text)], key)


def encrypted_agents(dsn: str, turns: list[tuple[str, str]], key: str = AES_KEY) -> None:
    """encrypted_agent's agent, compiled once on one connection, run once for each (thread id, text) of `turns`: the
    same rows as a call of encrypted_agent per thread, without a graph and a connection each (160 threads: 70 -> 30 ms
    a thread)."""
    from langgraph.graph import MessagesState

    def reply(state: MessagesState) -> dict:
        return {"messages": [AIMessage(content=f"anotado: {state['messages'][-1].content}")]}

    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    graph.add_edge("reply", END)
    serde = EncryptedSerializer.from_pycryptodome_aes(key=key.encode())
    with conn_for(dsn) as conn:
        app = graph.compile(checkpointer=PostgresSaver(conn, serde=serde))
        for thread_id, text in turns:
            app.invoke({"messages": [HumanMessage(content=text)]}, {"configurable": {"thread_id": thread_id}})


class Unmsgpackable:
    """An object msgpack cannot encode: with `pickle_fallback=True` langgraph pickles it."""

    def __init__(self, note: str):
        self.note = note


def pickle_thread(dsn: str, thread_id: str) -> None:
    """A checkpoint whose channel value and one pending write were pickled by JsonPlusSerializer's fallback."""
    serde = JsonPlusSerializer(pickle_fallback=True)
    with conn_for(dsn) as conn:
        saver = PostgresSaver(conn, serde=serde)
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"objeto": Unmsgpackable("valor"), "texto": "hola"}
        checkpoint["channel_versions"] = {"objeto": 1, "texto": 1}
        saved = saver.put(config, checkpoint, {"source": "loop", "step": 1}, {"objeto": 1, "texto": 1})
        saver.put_writes(saved, [("objeto", Unmsgpackable("escrito")), ("texto", "adiós")], task_id="t-pickle")


def shallow_database(dsn: str, thread_id: str) -> None:
    """ShallowPostgresSaver's schema (deprecated, still shipped) with one checkpoint."""
    from langgraph.checkpoint.postgres.shallow import ShallowPostgresSaver

    with conn_for(dsn) as conn, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        saver = ShallowPostgresSaver(conn)
        saver.setup()
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": ["hola"]}
        checkpoint["channel_versions"] = {"messages": 1}
        saver.put(config, checkpoint, {"source": "loop", "step": 1}, {"messages": 1})


def older_checkpoints_thread(dsn: str, thread_id: str) -> dict:
    """Two checkpoints of format v < 4 (base.empty_checkpoint) through PostgresSaver: the first with a Send written
    to its TASKS channel, which langgraph moves into the second's state on read (`_migrate_pending_sends`).
    Returns langgraph's own channel values of the second."""
    from langgraph.checkpoint.serde.types import TASKS
    from langgraph.types import Send

    with conn_for(dsn) as conn:
        saver = PostgresSaver(conn)
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        first = saver.put(config, empty_checkpoint(), {"source": "loop", "step": 1}, {})
        saver.put_writes(first, [(TASKS, Send("trabajador", {"pedido": "P-77"}))], task_id="t-send")
        second = saver.put(first, empty_checkpoint(), {"source": "loop", "step": 2}, {})
        return saver.get_tuple(second).checkpoint["channel_values"]


class JsonSerializer(JsonPlusSerializer):
    """Writes `json` rows, as langgraph before 2.0 did for some values; reading stays JsonPlusSerializer's own."""

    def dumps_typed(self, obj):
        import json

        from langchain_core.load import dumpd

        return "json", json.dumps(dumpd(obj)).encode()


def json_thread(dsn: str, thread_id: str) -> object:
    """A pending write stored as a `json` row (a HumanMessage in langchain's lc format) through PostgresSaver;
    returns what langgraph's own reader gives back for it."""
    with conn_for(dsn) as conn:
        saver = PostgresSaver(conn, serde=JsonSerializer())
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        saved = PostgresSaver(conn).put(config, empty_checkpoint(), {"source": "loop", "step": 1}, {})
        saver.put_writes(saved, [("messages", HumanMessage(content="hola, soy C77", id="h-json"))], task_id="t-json")
        return saver.get_tuple(saved).pending_writes[0][2]
