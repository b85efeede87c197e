"""No sweep run stays 'running' once its process is gone (issue 41 #5): a run whose process was SIGKILLed mid-run is
closed as 'stopped', with the reason, by the next run and by the Sweeps page; a live run is never closed. And a run
the dashboard starts runs in a thread of its own, to its end, whatever happens to the page that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import psycopg
from apptools import frame, wait_until
from conftest import ROOT
from streamlit.testing.v1 import AppTest

from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store, put_memory
from core.operations import sweep

DIMS = 64
# A real scheduled run in a process of its own that stops at its TTL step (as a pod at work does) until it is killed.
HELD_RUN = """
import sys, time
from core.db import Database
from core.operations.sweep import run_sweep


def hold(stage, fraction, detail):
    if stage == "ttl":
        print("ttl", flush=True)
        time.sleep(3600)


run_sweep(Database(sys.argv[1]), trigger="scheduled", on_step=hold)
"""
SWEEP_LOCK = (
    "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND classid = %s::bigint::oid "
    "AND objid = %s::bigint::oid"
)


def sweep_lock_holders(db) -> int:
    return db.fetch_one(SWEEP_LOCK, (sweep.SWEEP_LOCK_ID >> 32, sweep.SWEEP_LOCK_ID & 0xFFFFFFFF))["n"]


def killed_mid_run(db) -> int:
    """A run whose process was SIGKILLed at its TTL step (its row left 'running'); returns its id, once PostgreSQL
    has ended the dead process's session (and so its lock)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HELD_RUN, db.dsn],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout.readline() == b"ttl\n"
    assert sweep_lock_holders(db) == 1
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    proc.stdout.close()
    wait_until(lambda: sweep_lock_holders(db) == 0, timeout=30)
    (run,) = db.fetch("SELECT id, status FROM core_sweep_log")
    assert run["status"] == "running"
    return run["id"]


def test_the_next_run_closes_a_run_whose_process_was_killed(db):
    dead = killed_mid_run(db)
    result = sweep.run_sweep(db, trigger="scheduled")
    assert result.status == "ok"
    closed = db.fetch_one("SELECT status, finished_at, error FROM core_sweep_log WHERE id = %s", (dead,))
    assert closed["status"] == "stopped" and closed["finished_at"] is not None
    assert closed["error"].startswith("its process ended before the run did") and "the next run" in closed["error"]


def test_the_sweeps_page_closes_a_run_whose_process_was_killed(db, app_env):
    dead = killed_mid_run(db)
    app_env(db.dsn, LOCAL_ROLES="sre")
    at = AppTest.from_file("../dashboard.py", default_timeout=60)
    at.run()
    at.switch_page("app_pages/sweeps.py").run()
    assert not at.exception, at.exception
    log = frame(at, "id", "status", "error")
    assert log["status"].tolist() == ["Detenido (su proceso terminó antes: lo que borró no quedó registrado)"]
    assert "its process ended before the run did" in log["error"][0]
    assert db.fetch_one("SELECT status FROM core_sweep_log WHERE id = %s", (dead,))["status"] == "stopped"


def test_a_live_run_is_never_closed(db):
    at_ttl, release = threading.Event(), threading.Event()

    def hold(stage: str, fraction: float, detail: str) -> None:
        if stage == "ttl":
            at_ttl.set()
            assert release.wait(60)

    running = threading.Thread(target=sweep.run_sweep, args=(db,), kwargs={"trigger": "manual", "on_step": hold})
    running.start()
    try:
        assert at_ttl.wait(60)
        assert sweep.close_dead_runs(db) == []
        assert [r["status"] for r in db.fetch("SELECT status FROM core_sweep_log")] == ["running"]
    finally:
        release.set()
        running.join(60)
    assert [r["status"] for r in db.fetch("SELECT status FROM core_sweep_log")] == ["ok"]


def test_a_run_started_in_the_background_ends_whoever_waits_for_it(db):
    """start_sweep runs the sweep in a thread of its own: the caller may stop waiting, the run goes on to its end;
    while another transaction holds the expired rows the run waits for them, then sweeps them."""
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    put_memory(store, ("proveedores", "P1"), "aviso-flash", {"texto": "flash"}, valid_for_minutes=0.001)
    wait_until(lambda: db.fetch_one("SELECT count(*) AS n FROM store WHERE expires_at < now()")["n"] == 1)
    with psycopg.connect(db.dsn) as agent:  # an agent's transaction on the expired row
        agent.execute("SELECT 1 FROM store WHERE expires_at < now() FOR UPDATE")
        job = sweep.start_sweep(db, trigger="manual", operator="sre")
        wait_until(lambda: any(stage == "ttl" for stage, _, _ in job.steps))
        assert not job.done.is_set()
        agent.rollback()
    assert job.done.wait(60)
    result = job.outcome()
    assert (result.status, result.documents_deleted) == ("ok", 1)
    assert db.fetch_one("SELECT status FROM core_sweep_log WHERE id = %s", (result.run_id,))["status"] == "ok"
