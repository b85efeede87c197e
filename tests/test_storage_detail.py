"""Where the checkpoint bytes go (core/storage/storage_detail.py): bytes per channel, per step, threads growing
faster than linearly, orphans and PostgreSQL's statistics, each equal to SQL over the three tables, the same batched
or not; and the prune preview. Real graphs and agents on the real embedded PostgreSQL."""

from __future__ import annotations

import operator
from typing import Annotated, TypedDict

import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph
from prune_graphs import delta_graph
from test_sweep import DIMS, converse

from core.history import tool_calls
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store
from core.storage import prune, storage, storage_detail

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
    growth_graph(saver, "history").invoke(
        {"history": [], "latest": "", "n": 0}, {"configurable": {"thread_id": "cuadratico"}}
    )
    growth_graph(saver, "latest").invoke(
        {"history": [], "latest": "", "n": 0}, {"configurable": {"thread_id": "lineal"}}
    )
    delta_graph(saver).invoke({"items": ["a"], "n": 0}, {"configurable": {"thread_id": "delta"}})
    converse(db, build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS))
    # An orphan blob (no checkpoint references its version) and a write whose checkpoint is gone.
    db.execute(
        "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob) "
        "VALUES ('lineal', '', 'latest', '99.huérfano', 'msgpack', '\\x0102030405'::bytea)"
    )
    db.execute(
        "INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, "
        "blob) VALUES ('lineal', '', 'no-existe', 't', 0, 'latest', 'msgpack', '\\x010203'::bytea)"
    )


SQL_CHANNELS = """
SELECT channel, sum(blobs) AS blobs, sum(blob_bytes) AS blob_bytes, sum(writes) AS writes, sum(write_bytes) AS
write_bytes
FROM (SELECT channel, 1 AS blobs, coalesce(octet_length(blob), 0) AS blob_bytes, 0 AS writes, 0 AS write_bytes
      FROM checkpoint_blobs {where}
      UNION ALL
      SELECT channel, 0, 0, 1, coalesce(octet_length(blob), 0) FROM checkpoint_writes {where}) x
GROUP BY channel"""


def by_channel(frame) -> dict:
    return {r.channel: (r.blobs, r.blob_bytes, r.writes, r.write_bytes) for r in frame.itertuples()}


def test_storage_detail_equals_sql_batched_or_not(db):
    write(db)
    sql = {
        r["channel"]: (r["blobs"], r["blob_bytes"], r["writes"], r["write_bytes"])
        for r in db.fetch(SQL_CHANNELS.format(where=""))
    }
    snapshots = []
    for batch_rows in (storage.STORAGE_BATCH_ROWS, 7):
        storage.refresh_thread_storage(db, batch_rows=batch_rows)
        assert by_channel(storage_detail.channel_totals(db)) == sql
        snapshots.append(
            (
                db.fetch("SELECT * FROM core_channel_storage ORDER BY 1, 2"),
                db.fetch("SELECT * FROM core_thread_growth ORDER BY 1"),
                storage_detail.orphans(db),
            )
        )
    assert snapshots[0][0] == snapshots[1][0] and snapshots[0][1] == snapshots[1][1]
    assert (
        {k: v for k, v in snapshots[0][2].items() if k != "as_of"}
        == {k: v for k, v in snapshots[1][2].items() if k != "as_of"}
        == {"blobs": 1, "blob_bytes": 5, "writes": 1, "write_bytes": 3, "sweep_run_id": None, "sweep_started_at": None}
    )

    for thread in ("cuadratico", "delta", "cliente-C1-1"):
        live = by_channel(storage_detail.thread_channels(db, thread))
        assert live == {
            r["channel"]: (r["blobs"], r["blob_bytes"], r["writes"], r["write_bytes"])
            for r in db.fetch(SQL_CHANNELS.format(where="WHERE thread_id = %(t)s"), {"t": thread})
        }
        steps = storage_detail.thread_steps(db, thread)
        # Every referenced blob is counted once, at the step that first referenced it; every row and write once.
        referenced = db.fetch_one(
            "SELECT coalesce(sum(octet_length(b.blob)), 0) AS n FROM checkpoint_blobs b WHERE b.thread_id = %(t)s AND "
            "EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns "
            "AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)",
            {"t": thread},
        )["n"]
        own = db.fetch_one(
            "SELECT sum(pg_column_size(checkpoint) + pg_column_size(metadata)) AS n, count(*) AS c "
            "FROM checkpoints WHERE thread_id = %(t)s",
            {"t": thread},
        )
        writes = db.fetch_one(
            "SELECT coalesce(sum(octet_length(w.blob)), 0) AS n FROM checkpoint_writes w "
            "WHERE thread_id = %(t)s AND checkpoint_id <> 'no-existe'",
            {"t": thread},
        )["n"]
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
        sizes = db.fetch_one(
            "SELECT pg_total_relation_size(%(t)s::regclass) AS total, pg_indexes_size(%(t)s::regclass) AS idx",
            {"t": name},
        )
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

    tool_calls.extract(db)  # as the sweep does before it prunes (a preview plans that run)
    with psycopg.connect(db.dsn, autocommit=True, row_factory=dict_row) as conn:
        done = prune.prune_history(conn, policy)
    assert (shown.checkpoints, shown.writes, shown.blobs, shown.bytes) == (
        done.checkpoints,
        done.writes,
        done.blobs,
        done.bytes,
    )
    assert (
        shown.checkpoints > 0
        and before - done.checkpoints == db.fetch_one("SELECT count(*) AS n FROM checkpoints")["n"]
    )


def test_storage_view_shows_where_the_bytes_go(db, app_env):
    from apptools import frame, metric
    from streamlit.testing.v1 import AppTest

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
    assert len(channels) >= len(totals) and channels["channel"].tolist()[: len(totals)] == totals["channel"].tolist()
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


# --- threads the application no longer knows (KNOWN_THREADS_QUERY) -------------------------------------------------

KNOWN = "SELECT thread_id FROM hilos_app"
UNKNOWN_COLUMNS = ["thread_id", "cliente_id", "checkpoints", "total_bytes", "last_ts"]
THREAD_BYTES = """
SELECT thread_id, sum(bytes) AS bytes FROM (
    SELECT thread_id, pg_column_size(checkpoint) + pg_column_size(metadata) AS bytes FROM checkpoints
    UNION ALL SELECT thread_id, coalesce(octet_length(blob), 0) FROM checkpoint_blobs
    UNION ALL SELECT thread_id, coalesce(octet_length(blob), 0) FROM checkpoint_writes) x
GROUP BY thread_id"""


def app_knows(db, every_other: int = 2) -> dict[str, int]:
    """The application's own table of threads (every other checkpoint thread, plus one it holds no checkpoint for);
    returns the bytes of the threads it does not know, per thread, counted by SQL over the three tables."""
    by_thread = {r["thread_id"]: int(r["bytes"]) for r in db.fetch(THREAD_BYTES)}
    known = sorted(by_thread)[::every_other] + ["solo-en-la-app"]
    db.execute("CREATE TABLE hilos_app (thread_id text PRIMARY KEY, cliente_id text)")
    db.execute("INSERT INTO hilos_app (thread_id) SELECT unnest(%(t)s::text[])", {"t": known})
    return {t: b for t, b in by_thread.items() if t not in known}


def test_unknown_threads_are_the_checkpoint_threads_the_query_does_not_return(db):
    write(db)
    unknown = app_knows(db)
    assert len(unknown) >= 4
    for batch_rows in (storage.STORAGE_BATCH_ROWS, 7):  # one range, and many (the query runs once per range)
        storage.refresh_thread_storage(db, batch_rows=batch_rows, known_query=KNOWN + " ;\n")
        found = storage_detail.unknown_threads(db)
        assert (found["threads"], found["bytes"], found["error"]) == (len(unknown), sum(unknown.values()), None)
        listed = storage_detail.unknown_thread_list(db, 100)
        assert dict(zip(listed["thread_id"], listed["total_bytes"], strict=True)) == unknown
        assert list(listed["total_bytes"]) == sorted(unknown.values(), reverse=True)
    assert len(storage_detail.unknown_thread_list(db, 2)) == 2

    # No query configured: nothing is counted, and nothing says 0.
    storage.refresh_thread_storage(db, known_query=None)
    found = storage_detail.unknown_threads(db)
    assert found["threads"] is None and found["bytes"] is None and found["error"] is None
    assert storage_detail.unknown_thread_list(db, 100).empty


@pytest.mark.slow  # waits out a statement timeout
def test_a_bad_known_threads_query_is_reported_and_changes_nothing(db):
    write(db)
    app_knows(db)
    db.execute(
        "CREATE FUNCTION borra_hilos() RETURNS SETOF text LANGUAGE sql AS 'DELETE FROM hilos_app RETURNING thread_id'"
    )
    for query, said in (
        ("SELECT thread_id FROM no_existe", "no_existe"),
        ("SELECT b AS thread_id FROM borra_hilos() b", "read-only transaction"),
        ("SELECT cliente_id FROM hilos_app", "thread_id"),
        ("SELECT thread_id FROM hilos_app WHERE cliente_id = %(id)s", "SUBJECT_THREAD_QUERY"),
        ("SELECT thread_id FROM hilos_app, pg_sleep(6)", "statement timeout"),
        # fails in a later range only: the ranges it had checked are not listed either
        (
            "SELECT thread_id FROM hilos_app WHERE 1 / (CASE WHEN thread_id > 'l' THEN 0 ELSE 1 END) = 1",
            "division by zero",
        ),
    ):
        storage.refresh_thread_storage(db, batch_rows=7, known_query=query)
        found = storage_detail.unknown_threads(db)
        assert found["threads"] is None and found["bytes"] is None and said in found["error"], (query, found)
        assert storage_detail.unknown_thread_list(db, 100).empty
        # The rest of the refresh went on: the other orphans and the bytes per channel are there.
        assert storage_detail.orphans(db)["blobs"] == 1 and not storage_detail.channel_totals(db).empty
    assert db.fetch_one("SELECT count(*) AS n FROM hilos_app")["n"] > 1


def test_the_sweep_job_finds_them_as_its_least_privileged_role(db, monkeypatch):
    import psycopg
    from test_prune_sweep import DEPLOY

    from core.operations import sweep_cli

    write(db)
    with psycopg.connect(db.dsn, autocommit=True) as owner:
        owner.execute((DEPLOY / "sweeper-grants.sql").read_text())
    unknown = app_knows(db)  # created after the grants: its SELECT on every table does not cover it
    monkeypatch.setenv("PG_AGENTES", psycopg.conninfo.make_conninfo(db.dsn, user="agent_memory_sweeper"))
    monkeypatch.setenv("EMBEDDINGS_DIMS", str(DIMS))
    monkeypatch.delenv("SWEEP_KEEP_LATEST", raising=False)
    monkeypatch.setenv("KNOWN_THREADS_QUERY", KNOWN)
    # The job's role may not read the application's table yet: the refresh goes on and says why.
    assert sweep_cli.main(["--trigger", "scheduled"]) == 0
    found = storage_detail.unknown_threads(db)
    assert found["threads"] is None and "permission denied" in found["error"]
    assert storage_detail.orphans(db)["blobs"] == 1
    db.execute("GRANT SELECT ON hilos_app TO agent_memory_sweeper")
    assert sweep_cli.main(["--trigger", "scheduled"]) == 0
    found = storage_detail.unknown_threads(db)
    assert (found["threads"], found["bytes"], found["error"]) == (len(unknown), sum(unknown.values()), None)


def test_storage_view_names_the_threads_the_application_no_longer_knows(db, app_env):
    import streamlit as st
    from apptools import as_int, ids, metric
    from streamlit.testing.v1 import AppTest

    write(db)
    unknown = app_knows(db)
    storage.refresh_thread_storage(db, known_query=KNOWN)
    app_env(db.dsn)

    def storage_view(lang: str = "es") -> AppTest:
        st.cache_data.clear()
        at = AppTest.from_file("../dashboard.py", default_timeout=60)
        at.query_params["lang"] = lang
        at.session_state["checkpoints.view"] = "storage"
        at.run()
        at.switch_page("app_pages/checkpoints.py").run()
        assert not at.exception
        return at

    def unknown_tables(at) -> list:  # a plain dataframe carries no key: known by its columns
        return [d.value for d in at.dataframe if list(d.value.columns) == UNKNOWN_COLUMNS]

    def listed(at) -> dict:
        (shown,) = unknown_tables(at)
        return dict(zip(ids(shown)["thread_id"], shown["total_bytes"].astype(int), strict=True))

    at = storage_view()
    assert as_int(metric(at, "Hilos que la aplicación ya no conoce")) == len(unknown)
    assert listed(at) == unknown
    assert any("KNOWN_THREADS_QUERY" in c.value for c in at.caption)
    at = storage_view("en")
    assert as_int(metric(at, "Threads the application no longer knows")) == len(unknown)

    # Without a query nothing can tell: said in words, never a 0.
    storage.refresh_thread_storage(db, known_query=None)
    at = storage_view()
    assert not [m for m in at.metric if m.label == "Hilos que la aplicación ya no conoce"]
    assert any(i.value.startswith("Hilos que la aplicación ya no conoce: no se puede saber") for i in at.info)
    assert not unknown_tables(at)

    # A failing query: its error is shown, never hidden.
    storage.refresh_thread_storage(db, known_query="SELECT thread_id FROM no_existe")
    at = storage_view("en")
    assert any(
        e.value.startswith("Threads the application no longer knows: `KNOWN_THREADS_QUERY` failed") for e in at.warning
    )
    assert any("no_existe" in c.value for c in at.code)
