"""Who looked at a customer's data (issue 31 item 4): the log, its hash chain, its retention, erasure, grants."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psycopg
import pytest
from conftest import ROOT, login_role

from core.db import Database
from core.operations.sweep import run_sweep
from core.privacy import chain, data_views, erasure
from core.privacy.data_views import DataViewLogError, View, customer_of, log_views
from tests.test_definer_safety import AGENT_TABLES
from tests.test_erasure import agents_for, converse, make_store, write_docs


def view(target="clientes.C1", customer="C1", kind="namespace", **kw) -> View:
    return View(kw.pop("viewer", "ana@example.com"), kw.pop("role", "manager"), kind, target, customer, **kw)


def backdate(db: Database, ids, days: int) -> None:
    db.execute(
        "UPDATE core_data_views SET viewed_at = now() - make_interval(days => %s) WHERE id = ANY(%s)", (days, list(ids))
    )


def test_views_are_logged_in_one_insert_and_sealed(db):
    assert (
        log_views(
            db,
            [
                view(),
                view("cliente-C1-1", kind="thread", role="sre", purpose="incidencia 42"),
                view("proveedores.P1", None),
            ],
        )
        == 3
    )
    rows = db.fetch("SELECT viewer, role, kind, customer_id, target, purpose FROM core_data_views ORDER BY id")
    assert [(r["kind"], r["customer_id"], r["target"], r["purpose"]) for r in rows] == [
        ("namespace", "C1", "clientes.C1", None),
        ("thread", "C1", "cliente-C1-1", "incidencia 42"),
        ("namespace", None, "proveedores.P1", None),
    ]
    result = chain.verify(db, "views")
    assert result.ok and result.links == 3


def test_editing_or_deleting_a_view_breaks_the_chain_at_that_row(db):
    log_views(db, [view(), view("clientes.C2", "C2"), view("clientes.C3", "C3")])
    ids = [r["id"] for r in db.fetch("SELECT id FROM core_data_views ORDER BY id")]
    db.execute("UPDATE core_data_views SET viewer = 'someone-else' WHERE id = %s", (ids[1],))
    result = chain.verify(db, "views")
    assert not result.ok and (result.row_id, result.problem) == (ids[1], "edited")
    db.execute("DELETE FROM core_data_views WHERE id = %s", (ids[1],))
    assert (chain.verify(db, "views").row_id, chain.verify(db, "views").problem) == (ids[1], "removed")


@pytest.mark.parametrize(
    "bad",
    [
        dict(viewer=""),
        dict(viewer="a\x00b"),
        dict(kind="peek"),
        dict(target=" "),
        dict(purpose=""),
        dict(purpose="x" * 1001),
        dict(customer="C\x001"),
    ],
)
def test_bad_views_are_refused_before_anything_is_written(db, bad):
    with pytest.raises(ValueError):
        view(**bad)


def test_a_locked_table_fails_one_write_quickly_and_writes_nothing(db):
    holder = psycopg.connect(db.dsn)
    holder.execute("LOCK TABLE core_data_views IN ACCESS EXCLUSIVE MODE")
    try:
        started = time.monotonic()
        with pytest.raises(DataViewLogError, match="2 view"):
            log_views(db, [view(), view("clientes.C2", "C2")])
        assert time.monotonic() - started < 5  # lock_timeout 1 s: the writer thread is never held for long
    finally:
        holder.rollback()
        holder.close()
    assert db.fetch_one("SELECT count(*) AS n FROM core_data_views")["n"] == 0


def test_recording_never_waits_on_a_hung_database_and_the_views_arrive_once_it_is_free(db):
    holder = psycopg.connect(db.dsn)
    holder.execute("LOCK TABLE core_data_views IN ACCESS EXCLUSIVE MODE")  # every INSERT waits on this lock
    try:
        batch = [view(), view("cliente-C1-1", kind="thread", role="sre", purpose="incidencia 42")]
        started = time.monotonic()
        assert data_views.record(db, batch) == 0
        # a page pays a queue append, never the database: an INSERT would wait out the lock_timeout (1 s) on the lock
        # held above before failing; the bound is half of that, not a speed (a loaded machine takes tens of ms)
        assert time.monotonic() - started < 0.5
        time.sleep(1.5)  # the writer tried (lock_timeout 1 s) and keeps them
        missing = data_views.unrecorded(db)
        assert (missing.views, missing.waiting, missing.waiting_since) == (0, 2, batch[0].viewed_at)
        assert "lock timeout" in missing.error
    finally:
        holder.rollback()
        holder.close()
    assert data_views.flush(db, 10)
    rows = db.fetch("SELECT viewed_at, target, purpose FROM core_data_views ORDER BY id")
    assert [(r["viewed_at"], r["target"], r["purpose"]) for r in rows] == [
        (v.viewed_at, v.target, v.purpose) for v in batch
    ]  # when they were viewed, not when written
    assert chain.verify(db, "views").ok and data_views.unrecorded(db) == data_views.Unrecorded()


def test_views_are_written_in_batches(db):
    queue = data_views.queue_for(db, every_s=0.3)
    started = time.monotonic()
    for i in range(20):
        data_views.record(db, [view(f"clientes.C{i}", f"C{i}")])
    assert time.monotonic() - started < 0.1
    assert queue.flush(5)
    # one INSERT for all twenty: one transaction id (xmin) for every row
    assert db.fetch_one("SELECT count(DISTINCT xmin::text) AS n, count(*) AS rows FROM core_data_views") == {
        "n": 1,
        "rows": 20,
    }


def test_views_that_do_not_fit_are_counted_shown_and_recorded_as_a_gap(db):
    from core.operations.exporter import database_metrics

    data_views.queue_for(db, capacity=3, retry_s=0.2)
    failures = data_views.LOG_FAILURES._value.get()
    holder = psycopg.connect(db.dsn)
    holder.execute("LOCK TABLE core_data_views IN ACCESS EXCLUSIVE MODE")
    try:
        batch = [view(f"clientes.C{i}", f"C{i}") for i in range(5)]
        assert data_views.record(db, batch) == 2  # the queue holds 3: two are lost, and counted at once
        assert data_views.LOG_FAILURES._value.get() == failures + 2
        missing = data_views.unrecorded(db)
        assert (missing.views, missing.since, missing.waiting) == (2, batch[3].viewed_at, 3)
    finally:
        holder.rollback()
        holder.close()
    assert data_views.flush(db, 10)
    assert [r["target"] for r in db.fetch("SELECT target FROM core_data_views ORDER BY id")] == [
        v.target for v in batch[:3]
    ]
    gap = db.fetch_one("SELECT views, since, until, process, reason FROM core_data_view_gaps")
    assert (gap["views"], gap["since"], gap["until"]) == (2, batch[3].viewed_at, batch[4].viewed_at)
    assert "queue" in gap["reason"] and gap["process"].endswith(f":{os.getpid()}")
    assert data_views.unrecorded(db) == data_views.Unrecorded(2, batch[3].viewed_at)  # from the database now
    with psycopg.connect(db.dsn, row_factory=psycopg.rows.dict_row) as conn:
        (metric,) = [m for m in database_metrics(conn) if m.name == "agent_memory_data_views_unrecorded"]
    assert metric.samples[0].value == 2.0
    assert chain.verify(db, "views").ok


EXITING = """
import sys
from core.db import Database
from core.privacy import data_views
db = Database(sys.argv[1])
data_views.record(db, [data_views.View("ana@example.com", "manager", "namespace", f"clientes.C{i}", f"C{i}")
                       for i in range(3)])
"""  # and exits at once: the queue is flushed at exit


@pytest.mark.slow  # new Python processes that exit
def test_views_queued_at_exit_are_written_or_said_lost(db):
    run = [sys.executable, "-c", EXITING, db.dsn]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(run, capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert db.fetch_one("SELECT count(*) AS n FROM core_data_views")["n"] == 3
    holder = psycopg.connect(db.dsn)
    holder.execute("LOCK TABLE core_data_views IN ACCESS EXCLUSIVE MODE")
    try:
        started = time.monotonic()
        done = subprocess.run(run, capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
        took = time.monotonic() - started
    finally:
        holder.rollback()
        holder.close()
    assert done.returncode == 0 and took < data_views.EXIT_WAIT_S + 10, (took, done.stderr)
    # a database that does not answer at exit cannot be told: the process says it (never silently)
    assert "3 view(s) of customer data" in done.stderr and "not recorded" in done.stderr, done.stderr
    assert db.fetch_one("SELECT count(*) AS n FROM core_data_views")["n"] == 3


def test_customer_of_a_namespace():
    assert customer_of("clientes.C9") == "C9" and customer_of("clientes.C9.viejo") == "C9"
    assert customer_of("proveedores.P1") is None and customer_of("clientes") is None


def test_retention_deletes_the_oldest_views_and_the_chain_verifies_from_the_cut(db):
    log_views(db, [view(f"clientes.C{i}", f"C{i}") for i in range(5)])
    ids = [r["id"] for r in db.fetch("SELECT id FROM core_data_views ORDER BY id")]
    # rows 0-2 old, 3 new, 4 old: only the oldest run goes (4 waits behind 3, so the chain stays whole)
    db.execute("ALTER TABLE core_data_views DISABLE TRIGGER USER")  # backdating is not an edit the chain should see:
    backdate(db, ids[:3] + ids[4:], 400)  # re-seal below with the old dates
    db.execute("ALTER TABLE core_data_views ENABLE TRIGGER USER")
    db.execute("DELETE FROM core_register_chain WHERE chain = 'views'")
    for i in ids:
        db.execute("SELECT core_register_seal('views', 'core_data_views', %s)", (i,))
    assert chain.verify(db, "views").ok
    assert data_views.sweep_step(db, 365) == 3
    assert [r["id"] for r in db.fetch("SELECT id FROM core_data_views ORDER BY id")] == ids[3:]
    result = chain.verify(db, "views")
    assert result.ok and result.cut_position == 3 and result.links == 2
    log_views(db, [view("clientes.C9", "C9")])  # the chain goes on after the cut
    assert chain.verify(db, "views").ok
    # deleting the oldest remaining row (a second cut without its record) is caught
    db.execute("DELETE FROM core_register_chain WHERE chain = 'views' AND row_id = %s", (ids[3],))
    db.execute("DELETE FROM core_data_views WHERE id = %s", (ids[3],))
    assert chain.verify(db, "views").problem == "link_removed"


def test_the_sweep_job_applies_the_retention_and_all_gone_goes_on_from_the_cut(db, monkeypatch):
    log_views(db, [view(), view("clientes.C2", "C2")])
    db.execute("UPDATE core_data_views SET viewed_at = viewed_at - interval '40 days'")
    monkeypatch.setenv("DATA_VIEWS_RETENTION_DAYS", "30")
    result = run_sweep(db, trigger="manual", operator="sre")
    assert result.status == "ok" and result.data_views_deleted == 2
    assert (
        db.fetch_one("SELECT data_views_deleted FROM core_sweep_log WHERE id = %s", (result.run_id,))[
            "data_views_deleted"
        ]
        == 2
    )
    assert db.fetch_one("SELECT count(*) AS n FROM core_data_views")["n"] == 0
    log_views(db, [view("clientes.C3", "C3")])
    verified = chain.verify(db, "views")
    assert verified.ok and verified.cut_position == 2 and verified.links == 1


def test_erasure_keeps_the_views_of_the_customer_and_the_chain(db):
    store = make_store(db)
    write_docs(store, "C1", 2)
    converse(agents_for(db, store), "C1")
    log_views(db, [view(), view("cliente-C1-1", kind="thread", role="sre")])
    result = erasure.erase(db, "C1", operator="dpo@example.com")
    assert result.status == "complete" and "core_data_views" not in result.counts_before
    assert db.fetch_one("SELECT count(*) AS n FROM core_data_views WHERE customer_id = 'C1'")["n"] == 2
    assert chain.verify(db, "views").ok and chain.verify(db, "erasure").ok


def test_customer_views_include_their_threads_viewed_without_a_customer(db):
    store = make_store(db)
    write_docs(store, "C1", 1)
    converse(agents_for(db, store), "C1")
    thread = db.fetch_one("SELECT thread_id FROM checkpoints WHERE metadata->>'cliente_id' = 'C1' LIMIT 1")["thread_id"]
    log_views(db, [view(), view(thread, None, kind="thread", role="sre"), view("clientes.C2", "C2")])
    found = data_views.customer_views(db, "C1")
    assert sorted(found["target"]) == sorted(["clientes.C1", thread])


def test_an_agent_role_has_no_grant_on_the_log(db):
    agent = login_role(db.dsn, "agent", AGENT_TABLES)
    with psycopg.connect(agent, autocommit=True) as conn:
        for statement in (
            "SELECT * FROM core_data_views",
            "SELECT * FROM core_data_view_gaps",
            "INSERT INTO core_data_view_gaps (views, since, until, process, reason) VALUES (1, now(), now(), 'x', 'y')",
            "INSERT INTO core_data_views (viewer, role, kind, target) VALUES ('x', 'y', 'thread', 't')",
            "DELETE FROM core_data_views",
            "DELETE FROM core_register_cuts",
            "SELECT core_register_seal('views', 'core_data_views', 1)",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
