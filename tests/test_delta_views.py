"""DeltaChannel values in the canonical SQL view (issue 42, item 2): `core_checkpoints_view.channel_values` at every
checkpoint of threads written by a stock PostgresSaver with langgraph's own DeltaChannel equals what langgraph's
`get_state_history` reads, or carries an explicit `{"delta": ...}` marker; no checkpoint shows the channel absent."""

from __future__ import annotations

from typing import Annotated, TypedDict

import psycopg
import pytest
from format_agents import concat_reducer, conn_for, delta_other_thread
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import _messages_delta_reducer
from psycopg.rows import dict_row

SNAPSHOT = "langgraph.checkpoint.serde.types._DeltaSnapshot"
FREQUENCIES = (1, 2, 3, 5)
TURNS = 7


def _graph(frequency: int) -> StateGraph:
    # functional form: the annotations must be evaluated here, where `frequency` is bound
    State = TypedDict(  # noqa: UP013
        "State",
        {
            "items": Annotated[list, DeltaChannel(concat_reducer, snapshot_frequency=frequency)],
            "messages": Annotated[list, DeltaChannel(_messages_delta_reducer, snapshot_frequency=frequency)],
        },
    )

    def answer(state: dict) -> dict:
        n = len(state["items"])
        update: dict = {"items": [f"item-{n}"], "messages": [AIMessage(content=f"respuesta {n}", id=f"ai-{n}")]}
        if n % 4 == 3:  # RemoveMessage tombstones and a replacement by id, through the delta reducer
            update["messages"] += [RemoveMessage(id=f"ai-{n - 2}"), HumanMessage(content="editado", id="h-0")]
        return update

    graph = StateGraph(State)
    graph.add_node("answer", answer)
    graph.add_edge(START, "answer")
    graph.add_edge("answer", END)
    return graph


def _history(dsn: str, thread_id: str, frequency: int) -> dict[str, dict]:
    """Write TURNS turns, then langgraph's own state at every checkpoint: {checkpoint_id: values}."""
    config = {"configurable": {"thread_id": thread_id}}
    with conn_for(dsn) as conn:
        app = _graph(frequency).compile(checkpointer=PostgresSaver(conn))
        for i in range(TURNS):
            app.invoke({"items": [f"in-{i}"], "messages": [HumanMessage(content=f"hola {i}", id=f"h-{i}")]}, config)
        return {s.config["configurable"]["checkpoint_id"]: s.values for s in app.get_state_history(config)}


def _view(dsn: str, thread_id: str) -> list[dict]:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        return conn.execute(
            "SELECT checkpoint_id, channel_versions, channel_values, delta_channels FROM core_checkpoints_view "
            "WHERE thread_id = %s ORDER BY checkpoint_id",
            (thread_id,),
        ).fetchall()


def _plain(value):
    """A channel value as langgraph holds it: a snapshot unwrapped, messages as (id, content)."""
    if isinstance(value, dict) and value.get("type") == SNAPSHOT:
        value = value["value"]
    if isinstance(value, list) and value and isinstance(value[0], dict) and "value" in value[0]:
        return [(m["value"]["id"], m["value"]["content"]) for m in value]
    return value


@pytest.fixture(scope="module")
def delta_views_db(create_database):
    dsn = create_database(prefix="deltaviews")
    histories = {f: _history(dsn, f"freq-{f}", f) for f in FREQUENCIES}
    delta_other_thread(dsn, "other-1", turns=5)
    return dsn, histories


@pytest.mark.parametrize("frequency", FREQUENCIES)
def test_every_checkpoint_of_the_view_holds_langgraphs_value(delta_views_db, frequency):
    dsn, histories = delta_views_db
    history = histories[frequency]
    rows = _view(dsn, f"freq-{frequency}")
    assert len(rows) == len(history) > TURNS
    sources = set()
    for row in rows:
        expected = history[row["checkpoint_id"]]
        for channel in ("items", "messages"):
            if channel not in row["channel_versions"]:
                assert expected.get(channel, []) == [], row["checkpoint_id"]
                continue
            assert channel in row["channel_values"], (channel, row["checkpoint_id"])  # never absent
            want = expected[channel] if channel == "items" else [(m.id, m.content) for m in expected[channel]]
            assert _plain(row["channel_values"][channel]) == want, (channel, row["checkpoint_id"])
            sources.add(row["delta_channels"][channel]["source"])
    # the walk was exercised (rebuilt values) unless every update is a snapshot
    assert sources == ({"snapshot"} if frequency == 1 else {"snapshot", "rebuilt"})
    removed = [r for r in rows if "messages" in r["channel_values"]]
    assert any("editado" in str(r["channel_values"]["messages"]) for r in removed)


def test_a_reducer_sql_cannot_know_carries_the_marker_never_an_absent_key(delta_views_db):
    dsn, _ = delta_views_db
    rows = _view(dsn, "other-1")
    markers = 0
    for row in rows:
        for channel in ("counts", "tags"):
            if channel not in row["channel_versions"]:
                continue
            assert channel in row["channel_values"], (channel, row["checkpoint_id"])
            value = row["channel_values"][channel]
            info = row["delta_channels"][channel]
            if info["source"] == "snapshot":
                assert value["type"] == SNAPSHOT
                continue
            # a dict merge and a list without repeats are neither messages nor concatenation: never guessed
            assert info["source"] == "unrebuilt" and info["reducer"] is None, (channel, row["checkpoint_id"])
            marker = value["delta"]
            assert marker["rebuilt"] is False and marker["reason"]
            assert marker["writes_since"] == len(marker["writes"]) == info["writes_since"]
            markers += 1
    assert markers > 0
    # the list without repeats looks like concatenation until a repeat: it is caught by the snapshots
    tags = [r["channel_values"]["tags"] for r in rows if "tags" in r["channel_values"]]
    assert not any(isinstance(v, list) and len(v) != len(set(v)) for v in tags)


def test_a_thread_without_delta_channels_reads_as_before(create_database):
    dsn = create_database(prefix="deltaplain")
    from langgraph.graph import MessagesState

    graph = StateGraph(MessagesState)
    graph.add_node("reply", lambda s: {"messages": [AIMessage(content="hola")]})
    graph.add_edge(START, "reply")
    graph.add_edge("reply", END)
    with conn_for(dsn) as conn:
        graph.compile(checkpointer=PostgresSaver(conn)).invoke(
            {"messages": [HumanMessage(content="buenas")]}, {"configurable": {"thread_id": "plain-1"}}
        )
    rows = _view(dsn, "plain-1")
    assert rows and all(r["delta_channels"] is None for r in rows)
    assert [m["value"]["content"] for m in rows[-1]["channel_values"]["messages"]] == ["buenas", "hola"]
