"""Views lost by a dashboard process killed without a clean exit (issue 43 finding 4): a real process records views
of a customer while the database refuses them and is SIGKILLed with them in memory; the next recorder to start
(another process) records "an unknown number of views lost by host:pid between T1 and T2", and the DPO reads it on
Registro de accesos in Spanish and English."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime

import psycopg
import pytest
from conftest import ROOT

from core.db import Database, reset_pool
from core.operations.exporter import database_metrics
from core.privacy import data_views
from tests.test_access_pages import dashboard, texts
from tests.test_data_views import EXITING
from ui.safe import md_code

pytestmark = pytest.mark.slow  # real dashboard processes, killed

VIEWING = """
import sys
from core.db import Database
from core.privacy import data_views
db = Database(sys.argv[1])
view = data_views.View("ana@example.com", "manager", "namespace", "clientes.C7", "C7")
data_views.record(db, [view])
print(view.viewed_at.isoformat(), flush=True)
sys.stdin.read()  # until killed
"""


def test_a_killed_process_leaves_a_gap_the_next_start_records_and_the_dpo_reads(create_database, app_env):
    db = Database(create_database())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = psycopg.connect(db.dsn)
    holder.execute("LOCK TABLE core_data_views IN SHARE MODE")  # reads go on, every INSERT of views waits
    child = subprocess.Popen(
        [sys.executable, "-c", VIEWING, db.dsn],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        viewed_at = datetime.fromisoformat(child.stdout.readline().strip())
        child.send_signal(signal.SIGKILL)  # an OOM kill: no atexit, the view is only in its memory
        child.wait(30)
        killed_at = datetime.now(UTC)
    finally:
        holder.rollback()
        holder.close()
        child.stdout.close()
        child.stderr.close()
        child.stdin.close()
    assert child.returncode == -signal.SIGKILL
    assert db.fetch_one("SELECT count(*) AS n FROM core_data_views")["n"] == 0

    data_views.queue_for(db)  # the next recorder to start, in another process
    gap = db.fetch_one("SELECT views, since, until, process, reason FROM core_data_view_gaps")
    assert gap is not None, "the killed process's views left no trace"
    assert gap["process"] == f"{socket.gethostname()}:{child.pid}" and gap["views"] is None
    assert gap["since"] <= viewed_at and killed_at <= gap["until"] <= datetime.now(UTC), (gap, viewed_at, killed_at)
    assert "unknown" in gap["reason"]
    assert data_views.unrecorded(db).crashes == (data_views.Crash(gap["process"], gap["since"], gap["until"]),)
    data_views.queue_for(db).close()
    assert db.fetch_one("SELECT count(*) AS n FROM core_data_view_gaps")["n"] == 1  # recorded once
    with psycopg.connect(db.dsn, row_factory=psycopg.rows.dict_row) as conn:
        metrics = {
            m.name: m.samples[0].value for m in database_metrics(conn) if m.name.startswith("agent_memory_data_views")
        }
    assert metrics["agent_memory_data_views_lost_by_killed_processes"] == 1.0
    assert metrics["agent_memory_data_views_unrecorded"] == 0.0

    app_env(db.dsn)
    said = texts(dashboard("app_pages/access_register.py"))
    assert f"Un número desconocido de consultas de datos de clientes del proceso {md_code(gap['process'])}" in said, (
        said
    )
    app_env(db.dsn, LOCAL_ROLES="dpo")
    said = texts(dashboard("app_pages/access_register.py", lang="en"))
    assert f"An unknown number of views of customer data by process {md_code(gap['process'])}" in said, said
    reset_pool(db.dsn)
    db.close()


def test_a_clean_exit_leaves_no_gap_and_an_exit_that_lost_views_leaves_one(db):
    run = [sys.executable, "-c", EXITING, db.dsn]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(run, capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert db.fetch_one("SELECT count(*) AS n FROM core_data_view_writers")["n"] == 0  # closed: its marker gone
    holder = psycopg.connect(db.dsn)
    holder.execute("LOCK TABLE core_data_views IN SHARE MODE")
    try:
        done = subprocess.run(run, capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    finally:
        holder.rollback()
        holder.close()
    assert done.returncode == 0 and "3 view(s) of customer data" in done.stderr, done.stderr
    data_views.queue_for(db)
    (crash,) = data_views.unrecorded(db).crashes  # only the exit that lost views: its count was only in its log
    assert crash.process.startswith(f"{socket.gethostname()}:") and crash.process != data_views.PROCESS


def test_a_running_process_keeps_its_marker_fresh_and_a_stale_one_elsewhere_is_a_gap(db, monkeypatch):
    queue = data_views.queue_for(db, heartbeat_s=0.2)
    first = db.fetch_one("SELECT heartbeat_at FROM core_data_view_writers WHERE process = %s", (data_views.PROCESS,))
    time.sleep(1.5)  # idle: no view, the heartbeat goes on
    beat = db.fetch_one("SELECT heartbeat_at FROM core_data_view_writers WHERE process = %s", (data_views.PROCESS,))
    assert beat["heartbeat_at"] > first["heartbeat_at"]
    queue.close()
    assert db.fetch_one("SELECT count(*) AS n FROM core_data_view_writers")["n"] == 0

    # a process on another host (a pid this host cannot check) is gone once its heartbeat is older than the bound
    monkeypatch.setattr(data_views, "HOST", "other-node")
    monkeypatch.setattr(data_views, "PROCESS", "other-node:1")
    data_views.start_marker(db, datetime.now(UTC))
    monkeypatch.undo()
    data_views.queue_for(db).close()  # within the bound: alive, nothing recorded
    assert data_views.unrecorded(db).crashes == ()
    monkeypatch.setattr(data_views, "STALE_AFTER_S", 0.5)
    time.sleep(1)
    data_views.queue_for(db)
    assert [c.process for c in data_views.unrecorded(db).crashes] == ["other-node:1"]
