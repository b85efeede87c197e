"""Issue 52, clusters D (storage) and F (the sweep's and the prune's logs): the sweep's storage refresh, its detail,
the attribution coverage, the prune's pending blob keys and the sweep's own log live in the dashboard's own database.
With it apart, the refresh reads the agents' tables in one READ ONLY snapshot and writes its rows in ours, the sweep
takes its lock and writes its log in ours, the prune records the freed blobs' keys in ours before the agents' deletes,
and the readers (Sweeps page, Storage view, coverage, exporter, access notice) read ours: the agents' database receives
nothing of the two clusters, and every table of ours holds what one database holds for the same agents' rows. Writes
come from the real tools: stock PostgresStore, a graph on PostgresSaver, our retail agent and the memory article's
agents (tests/capture_writes.py); the sweep, prune and purge are the real code."""

from __future__ import annotations

import contextlib
import threading
import uuid

import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row
from streamlit.testing.v1 import AppTest

from core.capture.follower import catch_up, drop_slot
from core.db import Database, forget_dashboard_database, use_dashboard_database
from core.history import tool_calls, views
from core.operations import sweep, sweep_reads
from core.operations.exporter import database_metrics
from core.privacy import access_notice, subjects
from core.storage import prune, storage, storage_detail
from tests import own_db
from tests.capture_writes import article_turns, graph_turns, our_agent_turns, store_writes, vector_store
from tests.conftest import dsn_for

D_TABLES = (
    "core_thread_storage",
    "core_thread_storage_refresh",
    "core_channel_storage",
    "core_thread_growth",
    "core_thread_orphans",
    "core_coverage_snapshot",
    "core_prune_pending_blobs",
)
F_TABLES = ("core_sweep_log", "core_sweep_documents", "core_prune_threads")
TABLES = D_TABLES + F_TABLES
# Times of the writes themselves (now() when the row was written, a run's duration), not of the data.
VOLATILE = ("computed_at", "seconds", "pruned_at", "started_at", "finished_at")
COUNT_ROWS = """
SELECT (SELECT count(*) FROM checkpoints) AS checkpoints, (SELECT count(*) FROM checkpoint_blobs) AS blobs,
       (SELECT count(*) FROM checkpoint_writes) AS writes"""


dbname = own_db.dbname


def written_there(dsn: str, tables: tuple[str, ...] = TABLES) -> dict[str, int]:
    return own_db.written_there(dsn, tables)


def contents(dsn: str, tables: tuple[str, ...] = TABLES) -> dict[str, list[str]]:
    return own_db.contents(dsn, tables, VOLATILE)


def counts(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        return dict(conn.execute(COUNT_ROWS).fetchone())


def states(dsn: str) -> dict[str, list[str]]:
    """Every thread's checkpoints as langgraph reads them back (ids, values loaded from their blobs, pending writes)."""
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        saver = PostgresSaver(conn)
        threads = [r["thread_id"] for r in conn.execute("SELECT DISTINCT thread_id FROM checkpoints")]
        return {
            t: [
                repr((c.config["configurable"], c.checkpoint["channel_values"], c.pending_writes))
                for c in saver.list({"configurable": {"thread_id": t}})
            ]
            for t in sorted(threads)
        }


@pytest.fixture(scope="module")
def written(create_database):
    """A migrated agents' database written by the real agents, never read by a pool: the template of each test's
    two copies. Some store documents expire at once (the sweep's TTL step deletes them)."""
    dsn = create_database(prefix="dfwritten")
    store_writes(dsn, 1, 60)
    our_agent_turns(dsn, 2, 4)
    graph_turns(dsn, 3, 8)
    article_turns(dsn, 4, 3)
    conn, store = vector_store(dsn)
    with conn:
        for i in range(3):
            store.put(("clientes", f"C{i}", "prefs"), f"caduca-{i}", {"texto": "por la tarde"}, ttl=0.0001, index=False)
    return dsn


@pytest.fixture
def layouts(written, pg_dsn):
    """See own_db.two_layouts."""
    with own_db.two_layouts(pg_dsn, written, "df") as dsns:
        yield dsns


frames_equal = own_db.frames_equal


def figures(cov: subjects.Coverage) -> tuple[int, int, int, int]:
    return cov.threads, cov.unattributed_threads, cov.bytes, cov.unattributed_bytes


def without(row: dict | None, *keys: str) -> dict:
    assert row is not None
    return {k: v for k, v in row.items() if k not in keys}


def sweep_samples(dsn: str) -> list:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        found = database_metrics(conn)
    return sorted(
        (m.name, tuple(s.labels.items()), s.value)
        for m in found
        if m.name.startswith("agent_memory_sweep_last")
        for s in m.samples
    )


@pytest.mark.slow  # real agents write the database; a sweep on two layouts
def test_apart_the_sweep_keeps_its_log_storage_and_coverage_in_ours_equal_to_one_database(layouts, app_env):
    from apptools import frame, metric

    default, split, ours = layouts
    for dsn in (default, split):
        catch_up(dsn)  # the change follower's shadow, where each layout keeps it
    d, s = Database(default), Database(split)
    # before any sweep, the coverage is counted live: apart, the links and our logs read in ours and passed (2Q)
    assert figures(subjects.coverage(s)) == figures(subjects.coverage(d))
    assert subjects.coverage(s).threads > 0

    policy = prune.PrunePolicy(keep_latest=1)
    runs = {name: sweep.run_sweep(db, trigger="manual", prune=policy) for name, db in (("s", s), ("d", d))}
    for result in runs.values():
        assert result.status == "ok", result.error
    assert runs["s"].documents_deleted == runs["d"].documents_deleted > 0
    assert runs["s"].prune is not None and runs["d"].prune is not None
    assert runs["s"].prune.checkpoints == runs["d"].prune.checkpoints > 0
    assert written_there(split) == {}  # not one row of the two clusters in the agents' database
    kept = contents(ours)
    assert kept == contents(default)
    for table in TABLES:
        assert kept[table], table  # every table of the two clusters holds rows: each was compared
    assert counts(split) == counts(default)

    # every reader of the two clusters gives what it gives on one database
    times = ("started_at", "finished_at", "seconds")
    frames_equal(sweep_reads.sweep_runs(s), sweep_reads.sweep_runs(d), times)
    assert without(sweep_reads.last_sweep(s), *times) == without(sweep_reads.last_sweep(d), *times)
    run = runs["s"].run_id
    assert run == runs["d"].run_id
    for part, frame_s in sweep_reads.run_details(s, run).items():
        frames_equal(frame_s, sweep_reads.run_details(d, run)[part])
    frames_equal(sweep_reads.deleted_per_run(s), sweep_reads.deleted_per_run(d), ("started_at", "run"))
    sizes = ("total_bytes", "sized_at", "as_of", "sweep_started_at")
    frames_equal(storage.table_totals(s), storage.table_totals(d), sizes)
    assert storage.table_totals(s)["as_of"].notna().all()
    refresh = ("computed_at", "seconds", "sweep_started_at")
    assert without(storage.storage_refresh(s), *refresh) == without(storage.storage_refresh(d), *refresh)
    frames_equal(storage_detail.channel_totals(s), storage_detail.channel_totals(d))
    frames_equal(storage_detail.growing_threads(s), storage_detail.growing_threads(d))
    assert without(storage_detail.orphans(s), "as_of", "sweep_started_at") == without(
        storage_detail.orphans(d), "as_of", "sweep_started_at"
    )
    assert without(storage_detail.unknown_threads(s), "as_of", "sweep_started_at") == without(
        storage_detail.unknown_threads(d), "as_of", "sweep_started_at"
    )
    frames_equal(views.largest_threads(s), views.largest_threads(d), ("computed_at",))
    cov_s, cov_d = subjects.coverage(s), subjects.coverage(d)
    assert figures(cov_s) == figures(cov_d) and cov_s.sweep_run_id == cov_d.sweep_run_id == run
    assert access_notice.checkpoint_retention_days(s) == access_notice.checkpoint_retention_days(d)
    for name, dsn in (("s", split), ("d", default)):  # the exporter's sweep metrics: each layout's own run
        started = runs[name].started_at
        assert started is not None
        assert sweep_samples(dsn) == [
            ("agent_memory_sweep_last_run_timestamp_seconds", (("status", "ok"),), started.timestamp()),
            ("agent_memory_sweep_last_success_timestamp_seconds", (), started.timestamp()),
        ]

    # the pages: the Sweeps page's log and the Storage view's figures, as on one database
    shown = {}
    for name, dsn in (("split", split), ("default", default)):
        app_env(dsn)  # the page's process knows our database by registration (PG_DASHBOARD is still refused)
        at = AppTest.from_file("../dashboard.py", default_timeout=60)
        at.run()
        at.switch_page("app_pages/sweeps.py").run()
        assert not at.exception
        log = frame(at, "id", "trigger", "status", "host")
        at = AppTest.from_file("../dashboard.py", default_timeout=60)
        at.session_state["checkpoints.view"] = "storage"
        at.run()
        at.switch_page("app_pages/checkpoints.py").run()
        assert not at.exception
        shown[name] = (
            log[["id", "trigger", "status", "documents", "threads"]].to_dict("records"),
            frame(at, "channel", "blob_bytes", "write_bytes", "total_bytes").to_dict("records"),
            metric(at, "Blobs huérfanos"),
            metric(at, "Escrituras huérfanas"),
        )
    assert shown["split"] == shown["default"]
    assert shown["split"][0] and shown["split"][1]
    assert written_there(split) == {}


@pytest.mark.slow  # a sweep held open in a thread
def test_apart_two_sweeps_at_once_are_refused_and_the_running_one_is_never_closed_as_stopped(split_db):
    entered, gate = threading.Event(), threading.Event()
    first: dict[str, sweep.SweepResult] = {}

    def hold(stage: str, fraction: float, detail: str) -> None:
        if stage == "ttl":  # the first run holds the lock here until the test lets it go on
            entered.set()
            assert gate.wait(120)

    def run() -> None:
        first["result"] = sweep.run_sweep(split_db, trigger="manual", dry_run=True, on_step=hold)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    try:
        assert entered.wait(120)
        second = sweep.run_sweep(split_db, trigger="manual", dry_run=True)
        assert second.status == "locked"
        # the Sweeps page closes runs no process holds the lock of: the running one holds it, in ours
        assert sweep.close_dead_runs(split_db) == []
        statuses = dict(sweep_reads.sweep_runs(split_db)[["id", "status"]].itertuples(index=False))
        assert statuses == {second.run_id: "locked", second.run_id - 1: "running"}
    finally:
        gate.set()
        worker.join(120)
    assert first["result"].status == "dry_run"
    assert dict(sweep_reads.sweep_runs(split_db)[["id", "status"]].itertuples(index=False)) == {
        second.run_id: "locked",
        first["result"].run_id: "dry_run",
    }
    assert written_there(split_db.dsn) == {}


@pytest.mark.slow  # real agents write the database; prunes on two layouts
def test_apart_the_prune_records_blob_keys_in_ours_first_and_a_crash_between_steps_loses_nothing(layouts, monkeypatch):
    """The plan's protocol (docs/own-database-plan.md, "Prune, deferred blobs"): the freed blobs' keys are committed
    in ours, then the agents' delete transaction runs; the purge reads the due keys in ours, deletes the unreferenced
    blobs on the agents' side, then the keys in ours. A crash between any two steps loses no checkpoint, write or
    blob still referenced; the next purge finishes the work."""
    default, split, ours = layouts
    policy = prune.PrunePolicy(keep_latest=1)

    def connect(dsn: str) -> psycopg.Connection:
        return psycopg.connect(dsn, autocommit=True, row_factory=dict_row)

    def pending(dsn: str) -> list[str]:
        return contents(dsn, ("core_prune_pending_blobs",))["core_prune_pending_blobs"]

    for dsn in (default, split):  # the prune keeps what the extraction has not read: it runs first, as in a sweep
        catch_up(dsn)
        tool_calls.extract(Database(dsn))
    before, rows_before = states(split), counts(split)
    assert states(default) == before

    # 1. the process dies after the keys were committed in ours, in the agents' delete transaction
    monkeypatch.setattr(prune, "DELETE_WRITES", "SELECT 1 / 0 FROM unnest(%s::text[], %s::text[], %s::text[])")
    with connect(split) as conn, pytest.raises(psycopg.errors.DivisionByZero):
        prune.prune_history(conn, policy, blob_grace_minutes=60)
    monkeypatch.undo()
    assert pending(ours)  # the intent, committed before any delete
    assert counts(split) == rows_before and states(split) == before  # nothing deleted
    # their blobs are all referenced still: the purge keeps every one and drops the keys
    with connect(split) as conn, connect(ours) as mine:
        assert prune.purge_pending_blobs(conn, 0, mine) == []
    assert pending(ours) == [] and counts(split) == rows_before and states(split) == before

    # 2. the prune, on both layouts: the same deletes, the same pending keys (ours' apart)
    results = {}
    for name, dsn in (("s", split), ("d", default)):
        with connect(dsn) as conn:
            results[name] = prune.prune_history(conn, policy, blob_grace_minutes=60)
    assert results["s"].checkpoints == results["d"].checkpoints > 0
    assert pending(ours) == pending(default) and pending(ours)
    assert counts(split) == counts(default)
    pruned = states(split)
    assert pruned == states(default) and pruned != before

    # 3. the purge dies after the agents' delete committed, before the keys are deleted in ours
    monkeypatch.setattr(
        prune, "DELETE_PENDING_KEYS", "SELECT 1 / 0 FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[])"
    )
    with connect(split) as conn, connect(ours) as mine, pytest.raises(psycopg.errors.DivisionByZero):
        prune.purge_pending_blobs(conn, 0, mine)
    monkeypatch.undo()
    assert pending(ours)  # the keys are still there
    assert states(split) == pruned  # no blob a kept checkpoint references was deleted
    with connect(default) as conn, conn.transaction():
        purged = prune.purge_pending_blobs(conn, 0)
    assert sum(t.blobs for t in purged) > 0
    assert counts(split) == counts(default)  # the unreferenced blobs went, as on one database
    # the next purge repeats a delete that finds nothing, then drops the keys
    with connect(split) as conn, connect(ours) as mine:
        assert prune.purge_pending_blobs(conn, 0, mine) == []
    assert pending(ours) == [] == pending(default)
    assert states(split) == pruned == states(default)
    assert counts(split) == counts(default)
    assert written_there(split) == {}


@pytest.mark.slow  # real agents write the database; a sweep, the move, a sweep
def test_the_upgrade_in_place_moves_the_sweep_log_and_storage_with_their_ids_and_the_next_sweep_follows_them(
    written, pg_dsn
):
    """A database the default layout swept (log, documents, pruned threads, pending blob keys, storage figures,
    coverage) is moved by core.own_database: every row copied with its id, the log's sequence past the copied runs,
    the detail tables' foreign keys holding; the pages read the same figures from ours, and the next sweep logs its
    run after the copied ones, in ours only."""
    from core.own_database import move

    agents = own_db.copy_of(pg_dsn, written, "dfmoved")
    ours = dsn_for(pg_dsn, dbname(agents) + "_dashboard")
    db = Database(agents)
    try:
        catch_up(agents)
        first = sweep.run_sweep(db, trigger="manual", prune=prune.PrunePolicy(keep_latest=1))
        assert first.status == "ok", first.error
        before = contents(agents)
        for table in TABLES:
            assert before[table], table  # every table of the two clusters holds rows to move
        details = sweep_reads.run_details(db, first.run_id)
        coverage = figures(subjects.coverage(db))
        db.close()
        use_dashboard_database(agents, ours)
        move(agents, log=lambda _: None)
        with psycopg.connect(agents) as conn:  # the agents' copies are dropped
            left = conn.execute("SELECT count(*) FROM pg_class WHERE relname = ANY(%s)", (list(TABLES),)).fetchone()
        assert left == (0,)
        assert contents(ours) == before  # every row, with its ids
        db = Database(agents)
        for part, frame_s in sweep_reads.run_details(db, first.run_id).items():
            frames_equal(frame_s, details[part])
        assert figures(subjects.coverage(db)) == coverage
        second = sweep.run_sweep(db, trigger="manual")
        assert second.error is None, second.error  # every step ran on the moved database (cluster G moved too)
        assert second.run_id == first.run_id + 1  # the sequence continues past the copied runs
        with psycopg.connect(ours) as conn:
            # the detail rows of the copied run still reference their run (the foreign keys were kept)
            orphaned = conn.execute(
                "SELECT count(*) FROM core_prune_threads p WHERE NOT EXISTS"
                " (SELECT 1 FROM core_sweep_log l WHERE l.id = p.run_id)"
            ).fetchone()
            assert orphaned == (0,)
            with pytest.raises(psycopg.errors.ForeignKeyViolation):
                conn.execute("INSERT INTO core_sweep_documents (run_id, prefix, key) VALUES (-1, 'p', 'k')")
        assert [r["id"] for r in sweep_reads.sweep_runs(db).to_dict("records")] == [second.run_id, first.run_id]
    finally:
        db.close()
        Database(ours).close()
        forget_dashboard_database(agents)
        with contextlib.suppress(psycopg.Error):
            drop_slot(agents)


MY_STEPS = ("ttl sweep", "retention", "prune", "thread storage", "attribution coverage")


@pytest.mark.slow  # real agents write the database; the deployment's roles
def test_the_sweep_jobs_role_logs_refreshes_and_prunes_into_ours_with_the_deployments_grants(layouts):
    """deploy/sweeper-grants.sql on the agents' database and deploy/dashboard-database-grants.sql on ours: the sweep
    job's role takes its lock and writes its log in ours, prunes on the agents' side with the blob keys in ours, and
    refreshes the storage figures and the coverage in ours: the same rows as one database's sweep."""
    from tests.conftest import ROOT, grant_our_functions

    default, split, ours = layouts
    role = "agent_memory_sweeper"
    with psycopg.connect(split, autocommit=True) as conn:
        conn.execute((ROOT / "deploy" / "sweeper-grants.sql").read_text())
    grant_our_functions(split, role)
    follower = f"capture_{uuid.uuid4().hex[:8]}"  # the file's other role (deploy/capture-grants.sql creates it)
    grants = (ROOT / "deploy" / "dashboard-database-grants.sql").read_text().replace("agent_memory_capture", follower)
    with psycopg.connect(ours, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {follower} LOGIN")
        conn.execute(grants.replace("DATABASE agent_memory_dashboard", f'DATABASE "{dbname(ours)}"'))
    as_sweeper = {dsn: psycopg.conninfo.make_conninfo(dsn, user=role) for dsn in (split, ours)}
    for dsn in (split, default):
        catch_up(dsn)  # the follower's own role keeps the shadow (the sweeper cannot read the slot)
    policy = prune.PrunePolicy(keep_latest=1)
    use_dashboard_database(split, as_sweeper[ours])  # the sweep job's process: its own credentials for ours
    sweeper = Database(as_sweeper[split])
    try:
        result = sweep.run_sweep(sweeper, trigger="scheduled", prune=policy)
    finally:
        sweeper.close()
        sweeper.ours.close()
        use_dashboard_database(split, ours)
    failed = [e.split(":")[0] for e in (result.error or "").split("; ") if e]
    assert not set(failed) & set(MY_STEPS), result.error
    assert result.prune is not None and result.prune.checkpoints > 0 and result.documents_deleted > 0
    one_db = sweep.run_sweep(Database(default), trigger="scheduled", prune=policy)
    assert one_db.status == "ok", one_db.error
    assert written_there(split) == {}
    kept, theirs = contents(ours, D_TABLES + F_TABLES[1:]), contents(default, D_TABLES + F_TABLES[1:])
    assert kept == theirs and all(kept.values())
    with psycopg.connect(ours, row_factory=dict_row) as conn:
        (run,) = conn.execute("SELECT id, status, documents_deleted, prune_checkpoints FROM core_sweep_log").fetchall()
    assert run["id"] == result.run_id and run["documents_deleted"] == one_db.documents_deleted
    assert run["prune_checkpoints"] == one_db.prune.checkpoints  # type: ignore[union-attr]


@pytest.mark.slow  # real agents write the database; a sweep and an erasure on two layouts
def test_an_erasure_apart_clears_the_customers_rows_of_the_two_clusters_in_ours_as_on_one_database(layouts):
    """After a sweep (storage figures per thread, the pruned threads, the sweep log's thread sample), the erasure finds
    the customer's rows of the two clusters in ours (evidence.own_targets on both databases) and leaves none, with
    the same counts as on one database."""
    from core.privacy import erasure

    default, split, ours = layouts
    customer = "C1"  # our retail agent's customer (tests/capture_writes.py our_agent_turns)
    with psycopg.connect(split) as conn:
        assert conn.execute(
            "SELECT count(*) FROM checkpoints WHERE metadata ->> 'cliente_id' = %s", (customer,)
        ).fetchone()[0]
    results = {}
    for name, dsn in (("s", split), ("d", default)):
        catch_up(dsn)
        db = Database(dsn)
        assert sweep.run_sweep(db, trigger="manual", prune=prune.PrunePolicy(keep_latest=1)).status == "ok"
        results[name] = erasure.erase(db, customer, operator="dpo@example.com")
    kept, one_db = results["s"], results["d"]
    # the same outcome on both (other customers' threads that mention the same store wait for a decision: the
    # scripted texts are shared; the customer's own threads are erased)
    assert (kept.status, kept.report) == (one_db.status, one_db.report)
    named = [t for t in TABLES if one_db.counts_before.get(t)]
    assert "core_thread_storage" in named, sorted(
        one_db.counts_before
    )  # the figures of the customer's threads, kept per thread
    for table in named:
        assert kept.counts_before[table] == one_db.counts_before[table], table
        assert kept.counts_before.get(f"agents:{table}", 0) == 0, table  # found in ours, nothing left in theirs
        assert kept.counts_after[table] == 0, table
    assert written_there(split) == {}
    with psycopg.connect(ours) as conn:
        left = conn.execute("SELECT count(*) FROM core_thread_storage WHERE cliente_id = %s", (customer,)).fetchone()
    assert left == (0,)
