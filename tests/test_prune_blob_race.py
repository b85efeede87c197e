"""Issue 43: a run that loaded an old checkpoint before a prune deleted its blobs writes a new head that points at
missing blobs.

langgraph's PostgresSaver keys blobs by (thread, ns, channel, version) and a new checkpoint writes blobs only for
the channels whose version changed; the others point at the loaded checkpoint's blobs. A fork (a run from an old
`checkpoint_id`: replay, time travel) loads a checkpoint whose channel versions only that checkpoint references. If
the prune deletes that checkpoint and its blobs between the run's load and its put (the re-check at delete time
sees no checkpoint referencing them: the run's checkpoint is not written yet), the new head references a blob that
is gone and the channel is silently lost on the next load.

Real graph, real saver (a subclass whose only change is a hook before `put`, to interleave deterministically), real
embedded PostgreSQL, the project's own prune; nothing is mocked."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypedDict

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph
from psycopg.rows import dict_row

from core.db import Database
from core.history import tool_calls
from core.storage import prune


class State(TypedDict, total=False):
    a: list[str]
    b: list[str]


class HookedSaver(PostgresSaver):
    """PostgresSaver that calls `before_put` once, right before the next checkpoint is written."""

    before_put: Callable[[], None] | None = None

    def put(self, config, checkpoint, metadata, new_versions):  # type: ignore[no-untyped-def]
        hook, self.before_put = self.before_put, None
        if hook is not None:
            hook()
        return super().put(config, checkpoint, metadata, new_versions)


def touch(state: State) -> State:
    return {"b": [*state.get("b", []), "t"]}


def graph_with(saver: PostgresSaver):  # type: ignore[no-untyped-def]
    builder = StateGraph(State)
    builder.add_node("touch", touch)
    builder.add_edge(START, "touch")
    builder.add_edge("touch", END)
    return builder.compile(checkpointer=saver)


def test_fork_from_a_checkpoint_pruned_between_load_and_put_keeps_its_channels(db: Database) -> None:
    saver = HookedSaver(db.pool)
    saver.setup()
    graph = graph_with(saver)
    config = {"configurable": {"thread_id": "t-race"}}
    graph.invoke({"a": ["A1"], "b": []}, config)
    old = graph.get_state(config)  # its `a` version is referenced by this run's checkpoints only
    graph.invoke({"a": ["A2"]}, config)
    graph.invoke({"a": ["A3"]}, config)
    assert old.values["a"] == ["A1"]

    def prune_now() -> None:
        tool_calls.extract(db)  # as the sweep does before it prunes
        with psycopg.connect(db.dsn, autocommit=True, row_factory=dict_row) as conn:
            done = prune.prune_history(conn, prune.validate_policy(1))
        assert done.checkpoints > 0, "the prune must remove the checkpoint the fork loaded"

    # The fork loads `old` (a = ["A1"]), then the prune runs, then the fork writes its first checkpoint, which
    # changes only `b` and so references old's blob of `a`.
    saver.before_put = prune_now
    graph.invoke({"b": ["fork"]}, old.config)

    head = graph.get_state(config)
    assert head.values.get("a") == ["A1"], f"the new head lost channel `a`: {head.values}"
    assert head.values.get("b") == ["fork", "t"]

    # After the grace, a later prune's purge deletes only the pending blobs no checkpoint references: the fork's head
    # references old's blob of `a`, which stays; the other pruned blobs go.
    pending = db.fetch_one("SELECT count(*) AS n FROM core_prune_pending_blobs")["n"]
    assert pending > 0
    blobs_before = db.fetch_one("SELECT count(*) AS n FROM checkpoint_blobs")["n"]
    with psycopg.connect(db.dsn, autocommit=True, row_factory=dict_row) as conn:
        later = prune.prune_history(conn, prune.validate_policy(1), blob_grace_minutes=0)
    assert db.fetch_one("SELECT count(*) AS n FROM core_prune_pending_blobs")["n"] == 0
    assert later.blobs > 0, later.summary()
    assert db.fetch_one("SELECT count(*) AS n FROM checkpoint_blobs")["n"] == blobs_before - later.blobs
    head = graph.get_state(config)
    assert head.values == {"a": ["A1"], "b": ["fork", "t"]}


def test_erasure_counts_and_deletes_pending_blobs_of_an_erased_thread(db: Database) -> None:
    """A pending row names its thread: erasure finds the table among our own (a `thread_id` column), deletes the
    erased threads' rows and counts them in its zero-count evidence."""
    from core.privacy.evidence import own_targets

    with psycopg.connect(db.dsn, autocommit=True, row_factory=dict_row) as conn:
        names = {t.name for t in own_targets(conn)}
    assert "core_prune_pending_blobs" in names
