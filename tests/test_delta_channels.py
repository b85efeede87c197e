"""A DeltaChannel's value at every checkpoint, as langgraph's own `get_state` reads it (issue 28), on threads
written by a stock PostgresSaver (tests/format_agents.py) on the real embedded server."""

from __future__ import annotations

import json

import pytest
from format_agents import (
    delta_other_state_at,
    delta_other_thread,
    delta_state_at,
    delta_thread,
    merge_reducer,
    unique_reducer,
)

from core.history import delta, views


@pytest.fixture(scope="module")
def delta_db(create_database):
    from core.db import Database

    database = Database(create_database(prefix="delta"))
    delta_thread(database.dsn, "delta-1")
    delta_other_thread(database.dsn, "delta-x")
    yield database
    database.close()


def _checkpoints(db, thread_id: str) -> list[str]:
    return views.thread_timeline(db, thread_id)["checkpoint_id"].tolist()


def _json(text):
    return json.loads(text) if isinstance(text, str) else None


def _values(db, thread_id: str, checkpoint_id: str) -> dict[str, dict]:
    frame = views.checkpoint_values(db, thread_id, checkpoint_id)
    return {r["channel"]: {**r, "value": _json(r["value"])} for r in frame.to_dict("records")}


def _shown(values: dict, channel: str):
    """A channel's shown value in langgraph's terms: a list of items, or of (id, content) for messages."""
    if channel not in values:
        return []
    value = values[channel]["value"]
    if channel == "messages":
        return [(m["value"]["id"], m["value"]["content"]) for m in value]
    return value


def test_every_checkpoint_shows_langgraphs_own_value(delta_db):
    ids = _checkpoints(delta_db, "delta-1")
    sources = []
    for checkpoint_id in ids:
        expected = delta_state_at(delta_db.dsn, "delta-1", checkpoint_id)
        got = _values(delta_db, "delta-1", checkpoint_id)
        assert _shown(got, "items") == expected["items"], checkpoint_id
        assert _shown(got, "messages") == expected["messages"], checkpoint_id
        sources += [got[ch]["source"] for ch in ("items", "messages") if ch in got]
        for ch in ("items", "messages"):  # every channel with a version has a value, never absent
            if ch in got:
                assert got[ch]["value"] is not None and got[ch]["source"] in ("snapshot", "rebuilt")
    assert sources.count("rebuilt") > sources.count("snapshot") > 0
    # the RemoveMessage written at step 3 took ai-1 out, as langgraph's reducer does
    last = _values(delta_db, "delta-1", ids[-1])
    assert "ai-1" not in [m for m, _ in _shown(last, "messages")] and len(_shown(last, "items")) == 10
    channels = delta.thread_values(delta_db, "delta-1").channels
    assert channels["items"].reducer == "concat" and channels["messages"].reducer == "messages"
    assert channels["items"].snapshots_checked == channels["messages"].snapshots_checked == 3


def test_the_diff_compares_the_values_langgraph_reads(delta_db):
    ids = _checkpoints(delta_db, "delta-1")
    for old, new in zip(ids, ids[1:], strict=False):
        diff = views.checkpoint_diff(delta_db, "delta-1", old, new).set_index("channel")
        before, after = delta_state_at(delta_db.dsn, "delta-1", old), delta_state_at(delta_db.dsn, "delta-1", new)
        if "items" not in diff.index:
            continue
        assert _json(diff.loc["items", "new_value"]) == after["items"]
        assert _json(diff.loc["items", "old_value"]) in (before["items"], None if not before["items"] else "-")
        assert (diff.loc["items", "change"] == "changed") == (
            before["items"] != after["items"] and before["items"] != []
        )
    # the whole thread: first checkpoint with messages against the last one
    first = next(c for c in ids if "messages" in _values(delta_db, "delta-1", c))
    diff = views.checkpoint_diff(delta_db, "delta-1", first, ids[-1]).set_index("channel")
    assert diff.loc["messages", "change"] == diff.loc["items", "change"] == "changed"
    moved = [c in ("added", "removed", "changed") for c in diff["change"]]
    assert moved == sorted(moved, reverse=True)  # changed channels first
    assert [m["value"]["id"] for m in json.loads(diff.loc["messages", "new_value"])][-1] == "ai-9"


def test_an_unknown_reducer_shows_the_snapshot_and_the_writes_since(delta_db):
    channels = delta.thread_values(delta_db, "delta-x").channels
    assert channels["counts"].reducer is None and channels["counts"].contradicted is None  # a dict: not a list
    # list-shaped like a concatenation, but a snapshot says otherwise: the value is not guessed
    assert channels["tags"].reducer is None and channels["tags"].contradicted is not None
    unrebuilt = 0
    for checkpoint_id in _checkpoints(delta_db, "delta-x"):
        expected = delta_other_state_at(delta_db.dsn, "delta-x", checkpoint_id)
        got = _values(delta_db, "delta-x", checkpoint_id)
        for channel, reducer, empty in (("counts", merge_reducer, {}), ("tags", unique_reducer, [])):
            if channel not in got:
                continue
            row = got[channel]
            if row["source"] == "snapshot":
                assert row["value"] == expected[channel]
                continue
            assert row["source"] == "unrebuilt"
            shown = row["value"]["delta"]
            assert shown["writes_since"] == row["writes_since"] == len(shown["writes"])
            assert shown["snapshot_step"] == (None if pd_isna(row["snapshot_step"]) else row["snapshot_step"])
            # the snapshot and the writes shown are exactly what langgraph folds into its value
            assert reducer(shown["snapshot"] or empty, shown["writes"]) == expected[channel], (checkpoint_id, channel)
            unrebuilt += 1
    assert unrebuilt >= 6


def pd_isna(value) -> bool:
    import pandas as pd

    return value is None or bool(pd.isna(value))


def test_a_thread_without_delta_channels_is_read_as_before(delta_db):
    from format_agents import pickle_thread

    pickle_thread(delta_db.dsn, "classic-1")
    assert delta.thread_values(delta_db, "classic-1").channels == {}
    assert views.delta_channels(delta_db, "classic-1").empty
    (checkpoint_id,) = _checkpoints(delta_db, "classic-1")
    got = _values(delta_db, "classic-1", checkpoint_id)
    assert got["texto"] == {**got["texto"], "source": "stored", "value": "hola"}
    assert views.checkpoint_values(delta_db, "classic-1", "no-such-checkpoint").empty
    assert views.checkpoint_values(delta_db, "", checkpoint_id).empty


# --- the Checkpoints page ----------------------------------------------------------------------------------


def _page(dsn: str, app_env, thread: str):
    from streamlit.testing.v1 import AppTest

    app_env(dsn)
    at = AppTest.from_file("../dashboard.py", default_timeout=60)
    at.query_params["thread"] = thread
    at.run()
    at.switch_page("app_pages/checkpoints.py").run()
    assert not at.exception
    return at


COLUMNS = {
    "delta": ("channel", "reducer", "snapshots_checked"),
    "diff": ("channel", "change", "new_value"),
    "values": ("channel", "source", "value"),
}


def _frame(at, table: str):
    from apptools import frame

    return frame(at, *COLUMNS[table])


def test_the_page_shows_rebuilt_values_and_the_diff(delta_db, app_env):
    ids = _checkpoints(delta_db, "delta-1")
    at = _page(delta_db.dsn, app_env, "delta-1")
    channels = _frame(at, "delta")
    assert sorted(channels["channel"]) == ["items", "messages"]
    assert set(channels["reducer"]) == {"concatenación de listas", "mensajes (reemplazo por id, RemoveMessage)"}
    # the default diff: the last two checkpoints, the latest one between snapshots
    diff = _frame(at, "diff").set_index("channel")
    expected = delta_state_at(delta_db.dsn, "delta-1", ids[-1])
    assert json.loads(diff.loc["items", "new_value"]) == expected["items"]
    at.selectbox(key="checkpoints.step").set_value(ids[-1]).run()
    assert not at.exception
    values = _frame(at, "values").set_index("channel")
    assert json.loads(values.loc["items", "value"]) == expected["items"]
    assert values.loc["items", "source"] == "reconstruido (concatenación de listas)"
    assert values.loc["messages", "source"] == "reconstruido (mensajes (reemplazo por id, RemoveMessage))"


def test_the_page_names_an_unknown_reducers_snapshot_and_writes(delta_db, app_env):
    ids = _checkpoints(delta_db, "delta-x")
    at = _page(delta_db.dsn, app_env, "delta-x")
    channels = _frame(at, "delta").set_index("channel")
    assert channels.loc["counts", "reducer"] == "desconocido" and channels.loc["tags", "reducer"] == "desconocido"
    at.selectbox(key="checkpoints.step").set_value(ids[-1]).run()
    assert not at.exception
    values = _frame(at, "values").set_index("channel")
    row = views.checkpoint_values(delta_db, "delta-x", ids[-1]).set_index("channel").loc["counts"]
    assert row["source"] == "unrebuilt" and row["writes_since"] > 0
    assert values.loc["counts", "source"] == (
        f"delta: instantánea en el paso {int(row['snapshot_step'])} + "
        f"{int(row['writes_since'])} escrituras desde entonces"
    )
    assert json.loads(values.loc["counts", "value"])["delta"]["writes"]


def test_the_access_export_of_a_delta_thread_holds_every_message_written(delta_db):
    from core.privacy import access

    delta_thread(delta_db.dsn, "cliente-C80-delta", turns=3)
    report = access.gather(delta_db, "C80")
    (thread,) = report.threads
    # everything held, in the order written: the message a RemoveMessage took out of the state is still held
    # (in the writes and a snapshot), so it is exported, and so is the removal
    assert [(m["kind"], m["id"]) for m in thread["messages"]] == [
        ("human", "h-0"),
        ("ai", "ai-1"),
        ("human", "h-1"),
        ("ai", "ai-3"),
        ("remove", "ai-1"),
        ("human", "h-2"),
        ("ai", "ai-5"),
    ]
    assert report.formats["delta_snapshots"] > 0 and report.formats["delta_checkpoints"] > 0


def test_the_timeline_of_a_delta_thread_lists_every_checkpoint(delta_db):
    timeline = views.thread_timeline(delta_db, "delta-1")
    assert len(timeline) == 15 and timeline["step"].tolist() == list(range(-1, 14))
    assert timeline["undecodable_writes"].sum() == 0 and timeline["refused_value"].isna().all()
