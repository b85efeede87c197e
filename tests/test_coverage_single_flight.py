"""The attribution coverage before any sweep stored it (issue 41 #2): computed once however many sessions open the
Erasure page meanwhile, in the background (one computation per process, one across the replicas by an advisory lock);
the page says it is being computed, then shows the figures with their date. Real agents' data (the memory article's,
tests/foreign_agents.py: 12 of 30 threads unattributed), nothing mocked."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import psycopg
from apptools import wait_until
from conftest import ROOT
from streamlit.testing.v1 import AppTest

from core.db import Database
from core.privacy import subjects

# another replica of the dashboard: its own process, asking for the coverage until it has it
REPLICA = """
import sys, time
from core.db import Database
from core.privacy import subjects

db = Database(sys.argv[1])
while not isinstance(subjects.stored_coverage(db), subjects.Coverage):
    time.sleep(0.2)
print(subjects.COVERAGE_FLIGHT.computations, flush=True)
"""
LOCK_WAITERS = (
    "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
    "AND classid = %s::bigint::oid AND objid = %s::bigint::oid"
)


def waiters(db: Database) -> int:
    key = subjects.COVERAGE_LOCK_ID
    return db.fetch_one(LOCK_WAITERS, (key >> 32, key & 0xFFFFFFFF))["n"]


def holding_the_lock(dsn: str) -> psycopg.Connection:
    """A session holding the coverage lock, as a replica computing the coverage does."""
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("SELECT pg_advisory_lock(%s)", (subjects.COVERAGE_LOCK_ID,))
    return conn


def test_the_coverage_is_computed_once_however_many_sessions_and_replicas_ask(article_agents):
    db = Database(article_agents().dsn)
    before = subjects.COVERAGE_FLIGHT.computations
    other = holding_the_lock(db.dsn)  # every computation waits until it is released
    replica = subprocess.Popen(
        [sys.executable, "-c", REPLICA, db.dsn],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        sessions = 12
        results: list = []
        asking = [
            threading.Thread(target=lambda: results.append(subjects.stored_coverage(db))) for _ in range(sessions)
        ]
        for thread in asking:
            thread.start()
        for thread in asking:
            thread.join(60)
        assert len(results) == sessions
        assert all(isinstance(r, subjects.CoverageComputing) for r in results), results
        assert len({r.since for r in results}) == 1  # one computation, every session joined it
        wait_until(lambda: waiters(db) == 2, timeout=60)  # one per process: this one and the other replica
    finally:
        other.close()  # the lock is free: one of the two computes, the other finds it stored
    out, _ = replica.communicate(timeout=120)
    wait_until(lambda: isinstance(subjects.stored_coverage(db), subjects.Coverage), timeout=60)
    assert (subjects.COVERAGE_FLIGHT.computations - before) + int(out) == 1
    cov = subjects.stored_coverage(db)
    assert (cov.unattributed_threads, cov.threads) == (12, 30) and cov.as_of is not None
    db.close()


def test_the_erasure_page_says_it_is_being_computed_then_shows_it_with_its_date(article_agents, app_env):
    dsn = article_agents().dsn
    app_env(dsn, LOCAL_ROLES="dpo")
    other = holding_the_lock(dsn)
    try:
        at = AppTest.from_file("../dashboard.py", default_timeout=60).run()
        at.switch_page("app_pages/erasure.py").run()
        assert not at.exception, at.exception
        assert any("se está calculando ahora" in i.value for i in at.info), [i.value for i in at.info]
        assert not any("Cobertura de atribución" in w.value for w in at.warning)
    finally:
        other.close()
    wait_until(lambda: isinstance(subjects.stored_coverage(Database(dsn)), subjects.Coverage), timeout=60)
    at.run()
    assert not at.exception, at.exception
    assert any("Cobertura de atribución: 12 / 30 de los hilos (40\xa0%)" in w.value for w in at.warning)
    assert any("Cifras según una actualización hecha fuera de los barridos (" in c.value for c in at.caption)
    assert not any("se está calculando" in i.value for i in at.info)
