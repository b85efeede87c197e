"""Where the checkpoint bytes go (core/checkpoints/storage_detail.py): bytes per channel, per step, threads growing
faster than linearly, orphans and PostgreSQL's statistics, each equal to SQL over the three tables, the same batched
or not; and the prune preview. Real graphs and agents on the real embedded PostgreSQL."""
from __future__ import annotations

import operator
from typing import Annotated, TypedDict

from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph

from core.checkpoints import prune, storage, storage_detail
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store
from prune_graphs import delta_graph
from test_sweep import DIMS, _converse

ITEM = "x" * 400


class Growing(TypedDict):
    history: Annotated[list, operator.add]  # the whole list is written again at every step: quadratic
    latest: str  # replaced at every step: linear
    n: int


def growth_graph(saver, key: str):
    g = StateGraph(Growing)
    g.add_node("a", lambda s: {key: [f"{ITEM}{s['n']}"] if key == "history" else f"{ITEM}{s['n']}", "n": s["n"] + 1})
    g.add_edge(START, "a")
    g.add_conditional_edges("a", lambda s: END if s["n"] >= 30 else "a")
    return g.compile(checkpointer=saver)


def write(db) -> None:
    saver = PostgresSaver(db.pool)
    growth_graph(saver, "history").invoke({"history": [], "latest": "", "n": 0}, {"configurable": {"thread_id": "cuadratico"}})
    growth_graph(saver, "latest").invoke({"history": [], "latest": "", "n": 0}, {"configurable": {"thread_id": "lineal"}})
    delta_graph(saver).invoke({"items": ["a"], "n": 0}, {"configurable": {"thread_id": "delta"}})
    _converse(db, build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS))
    # An orphan blob (no checkpoint references its version) and a write whose checkpoint is gone.
    db.execute("INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob) "
               "VALUES ('lineal', '', 'latest', '99.huérfano', 'msgpack', '\\x0102030405'::bytea)")
    db.execute("INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, "
               "blob) VALUES ('lineal', '', 'no-existe', 't', 0, 'latest', 'msgpack', '\\x010203'::bytea)")


SQL_CHANNELS = """
SELECT channel, sum(blobs) AS blobs, sum(blob_bytes) AS blob_bytes, sum(writes) AS writes, sum(write_bytes) AS write_bytes
FROM (SELECT channel, 1 AS blobs, coalesce(octet_length(blob), 0) AS blob_bytes, 0 AS writes, 0 AS write_bytes
      FROM checkpoint_blobs {where}
      UNION ALL
      SELECT channel, 0, 0, 1, coalesce(octet_length(blob), 0) FROM checkpoint_writes {where}) x
GROUP BY channel"""


def by_channel(frame) -> dict:
    return {r.channel: (r.blobs, r.blob_bytes, r.writes, r.write_bytes) for r in frame.itertuples()}


def test_storage_detail_equals_sql_batched_or_not(db):
    write(db)
    sql = {r["channel"]: (r["blobs"], r["blob_bytes"], r["writes"], r["write_bytes"])
           for r in db.fetch(SQL_CHANNELS.format(where=""))}
    snapshots = []
    for batch_rows in (storage.STORAGE_BATCH_ROWS, 7):
        storage.refresh_thread_storage(db, batch_rows=batch_rows)
        assert by_channel(storage_detail.channel_totals(db)) == sql
        snapshots.append((db.fetch("SELECT * FROM core_channel_storage ORDER BY 1, 2"),
                          db.fetch("SELECT * FROM core_thread_growth ORDER BY 1"), storage_detail.orphans(db)))
    assert snapshots[0][0] == snapshots[1][0] and snapshots[0][1] == snapshots[1][1]
    assert {k: v for k, v in snapshots[0][2].items() if k != "as_of"} == \
           {k: v for k, v in snapshots[1][2].items() if k != "as_of"} == \
           {"blobs": 1, "blob_bytes": 5, "writes": 1, "write_bytes": 3}

    for thread in ("cuadratico", "delta", "cliente-C1-1"):
        live = by_channel(storage_detail.thread_channels(db, thread))
        assert live == {r["channel"]: (r["blobs"], r["blob_bytes"], r["writes"], r["write_bytes"])
                        for r in db.fetch(SQL_CHANNELS.format(where="WHERE thread_id = %(t)s"), {"t": thread})}
        steps = storage_detail.thread_steps(db, thread)
        # Every referenced blob is counted once, at the step that first referenced it; every row and write once.
        referenced = db.fetch_one(
            "SELECT coalesce(sum(octet_length(b.blob)), 0) AS n FROM checkpoint_blobs b WHERE b.thread_id = %(t)s AND "
            "EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns "
            "AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)", {"t": thread})["n"]
        own = db.fetch_one("SELECT sum(pg_column_size(checkpoint) + pg_column_size(metadata)) AS n, count(*) AS c "
                           "FROM checkpoints WHERE thread_id = %(t)s", {"t": thread})
        writes = db.fetch_one("SELECT coalesce(sum(octet_length(w.blob)), 0) AS n FROM checkpoint_writes w "
                              "WHERE thread_id = %(t)s AND checkpoint_id <> 'no-existe'", {"t": thread})["n"]
        assert len(steps) == own["c"] and list(steps["n"]) == list(range(1, own["c"] + 1))
        assert steps["blob_bytes"].sum() == referenced and steps["checkpoint_bytes"].sum() == own["n"]
        assert steps["write_bytes"].sum() == writes and steps["cumulative"].iloc[-1] == steps["bytes"].sum()

    growing = storage_detail.growing_threads(db)
    assert "cuadratico" in set(growing["thread_id"]) and "lineal" not in set(growing["thread_id"])
    quadratic = growing.set_index("thread_id").loc["cuadratico"]
    assert quadratic["slope"] > 300 and quadratic["last_step_bytes"] > 10 * quadratic["first_step_bytes"]
    linear = db.fetch_one("SELECT * FROM core_thread_growth WHERE thread_id = 'lineal'")
    assert linear["steps"] > 30 and not linear["superlinear"]


def test_table_stats_come_from_postgresql(db):
    write(db)
    stats = storage_detail.table_stats(db).set_index("table_name")
    assert list(stats.index) == ["checkpoints", "checkpoint_blobs", "checkpoint_writes"]
    for name, row in stats.iterrows():
        sizes = db.fetch_one("SELECT pg_total_relation_size(%(t)s::regclass) AS total, "
                             "pg_indexes_size(%(t)s::regclass) AS idx", {"t": name})
        assert row["index_bytes"] == sizes["idx"] and abs(row["total_bytes"] - sizes["total"]) <= 8192 * 4
        assert row["table_bytes"] + row["index_bytes"] + row["toast_bytes"] == row["total_bytes"]
    assert stats["as_of"].notna().all()


def test_prune_preview_is_the_dry_run_and_deletes_nothing(db):
    write(db)
    before = db.fetch_one("SELECT count(*) AS n FROM checkpoints")["n"]
    policy = prune.validate_policy(3)
    shown = prune.preview(db, policy)
    assert db.fetch_one("SELECT count(*) AS n FROM checkpoints")["n"] == before
    assert db.fetch("SELECT * FROM core_sweep_log") == []
    import psycopg
    from psycopg.rows import dict_row
    with psycopg.connect(db.dsn, autocommit=True, row_factory=dict_row) as conn:
        done = prune.prune_history(conn, policy)
    assert (shown.checkpoints, shown.writes, shown.blobs, shown.bytes) == (done.checkpoints, done.writes, done.blobs,
                                                                          done.bytes)
    assert shown.checkpoints > 0 and before - done.checkpoints == db.fetch_one(
        "SELECT count(*) AS n FROM checkpoints")["n"]


def test_storage_view_shows_where_the_bytes_go(db, app_env):
    from streamlit.testing.v1 import AppTest

    from apptools import frame, metric
    from ui.tables import human_bytes

    write(db)
    storage.refresh_thread_storage(db)
    app_env(db.dsn)
    at = AppTest.from_file("../dashboard.py", default_timeout=60)
    at.query_params["thread"] = "cuadratico"
    at.session_state["checkpoints.view"] = "storage"
    at.run()
    at.switch_page("app_pages/checkpoints.py").run()
    assert not at.exception
    stats = frame(at, "table_name", "toast_bytes", "dead_tuples", "last_autovacuum")
    assert list(stats["table_name"])[:3] == ["checkpoints", "checkpoint_blobs", "checkpoint_writes"]
    assert int(stats["total_bytes"].iloc[3]) == int(stats["total_bytes"].iloc[:3].astype(int).sum())
    assert any(c.value.startswith("Estadísticas de PostgreSQL leídas el ") for c in at.caption)
    channels = frame(at, "channel", "blob_bytes", "write_bytes", "total_bytes")
    totals = storage_detail.channel_totals(db)
    assert len(channels) >= len(totals) and channels["channel"].tolist()[:len(totals)] == totals["channel"].tolist()
    growing = frame(at, "thread_id", "slope", "steps")
    assert "cuadratico" in set(growing["thread_id"]) and "lineal" not in set(growing["thread_id"])
    orphans = storage_detail.orphans(db)  # the count and its bytes in one figure, not the bytes as a delta
    assert metric(at, "Blobs huérfanos") == f"1 · {human_bytes(orphans['blob_bytes'])}"
    assert metric(at, "Escrituras huérfanas") == f"1 · {human_bytes(orphans['write_bytes'])}"
    assert at.get("plotly_chart") and any("steps_chart" in (c.proto.id or "") for c in at.get("plotly_chart"))

    at.number_input(key="checkpoints.storage.keep_latest").set_value(3).run()
    at.number_input(key="checkpoints.storage.idle_minutes").set_value(0).run()
    at.button(key="checkpoints.storage.prune_compute").click().run()
    assert not at.exception
    expected = prune.preview(db, prune.validate_policy(3, 0))
    assert metric(at, "La poda liberaría") == human_bytes(expected.bytes)
    shown = frame(at, "thread_id", "checkpoints", "writes", "blobs", "bytes")
    assert sorted(shown["thread_id"]) == sorted(t.thread_id for t in expected.threads)
