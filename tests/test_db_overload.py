"""Overload is not an outage (issue 41 #1): a pool kept busy by slow reads, more of them than it has connections, is
"busy" for the sessions that wait, never "not reachable", and the shared pool is never closed under the others; the
Degradation page says busy, not down; a stopped server is still down. On an embedded server of its own (an outage
here never touches the session's server). Real reads, nothing mocked: each slow read waits on an advisory lock the test
holds, so it lasts exactly as long as the test needs the pool busy (not a fixed pg_sleep waited out)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
import streamlit as st
from apptools import wait_until
from conftest import DIMS, own_embedded_server
from streamlit.testing.v1 import AppTest

from core.db import Database, DatabaseBusy, DatabaseUnavailable, failure_counts
from core.migrate import migrate

pytestmark = pytest.mark.slow  # seconds of held connections, an outage

POOL_SIZE = 8  # core.db.make_pool's max_size
LOCK_KEY = 4141  # the advisory lock the slow reads wait on while the test holds it


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from own_embedded_server(tmp_path_factory, "db-overload")


@pytest.fixture
def db(server):
    base, control = server
    name = f"ov_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    database = Database(psycopg.conninfo.make_conninfo(base, dbname=name))
    migrate(database.dsn, DIMS)
    yield database
    database.close()


@contextmanager
def slow_readers(db: Database, n: int, errors: list) -> Iterator[list[threading.Thread]]:
    """`n` sessions each in a read that lasts until the block ends (more than the pool has connections: the rest
    wait), started; at the end the reads are let finish and joined. Each read waits on an advisory lock held here
    on a connection of its own (not the pool's): to the pool it is a slow read, as a pg_sleep was."""
    with psycopg.connect(db.dsn, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))

        def read() -> None:
            try:
                db.fetch("SELECT pg_advisory_xact_lock_shared(%s)", (LOCK_KEY,))
            except Exception as exc:  # noqa: BLE001 - kept for the test's assertions
                errors.append(exc)

        threads = [threading.Thread(target=read) for _ in range(n)]
        try:
            for thread in threads:
                thread.start()
            wait_until(  # every connection of the pool is in a slow read
                lambda: db.pool.get_stats().get("pool_size") == POOL_SIZE and not db.pool.get_stats()["pool_available"]
            )
            yield threads
        finally:
            holder.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))
            for thread in threads:
                thread.join(60)


def test_a_busy_pool_is_busy_never_down_and_stays_open(db):
    pool, before = db.pool, failure_counts()
    slow_errors: list = []
    other_errors: list[list] = [[] for _ in range(4)]
    released = threading.Event()
    stop = threading.Event()
    read_after = [0] * 4  # reads of each other session that began after the slow reads were let finish

    def other_session(i: int) -> None:
        while not stop.is_set():
            after = released.is_set()
            try:
                db.fetch("SELECT 1 AS one")
                read_after[i] += after
            except Exception as exc:  # noqa: BLE001
                other_errors[i].append(exc)

    others = [threading.Thread(target=other_session, args=(i,)) for i in range(4)]
    try:
        with slow_readers(db, POOL_SIZE + 4, slow_errors):
            for thread in others:
                thread.start()
            # the pool stays busy until the readers that found no connection and every other session have waited
            # out the pool's wait (POOL_TIMEOUT_S) at least once
            wait_until(lambda: len(slow_errors) >= 4 and all(other_errors), timeout=60)
        released.set()
        wait_until(lambda: all(read_after), timeout=60)  # the other sessions read again once the slow reads ended
    finally:
        stop.set()
        for thread in others:
            thread.join(60)

    errors = slow_errors + [e for session in other_errors for e in session]
    assert errors, "the pool was never busy: this test proves nothing"
    said = [str(e) for e in errors]
    assert not [m for m in said if "not reachable" in m or "is closed" in m], said
    assert all(isinstance(e, DatabaseBusy) and "is busy" in str(e) for e in errors), said
    assert len(slow_errors) <= 4  # the reads that had a connection ended: nothing closed the pool under them
    assert db.pool is pool and not pool.closed
    after = failure_counts()
    assert after["busy"] - before["busy"] == len(errors) and after["down"] == before["down"]


def test_the_degradation_page_says_busy_not_down(db, app_env):
    app_env(db.dsn, LOCAL_ROLES="sre")
    at = AppTest.from_file("../dashboard.py", default_timeout=120)
    at.run()
    at.switch_page("app_pages/degradation.py").run()
    assert not at.exception and not at.error
    shared_due = time.monotonic() + 2.1  # past the page's shared sample (SHARE_S), taken during the run above
    errors: list = []
    with slow_readers(db, POOL_SIZE, errors):
        time.sleep(max(0.0, shared_due - time.monotonic()))
        at.run()
        assert not at.exception
        assert not [e.value for e in at.error if "no responde" in e.value], [e.value for e in at.error]
        warnings = [w.value for w in at.warning]
        assert any("ocupada" in w for w in warnings), warnings
    assert not errors
    assert "ocupada" in next(c.value for c in at.caption if c.value.startswith("Accesos fallidos"))


def test_a_stopped_server_is_down_and_the_pool_reconnects_when_it_is_back(db, server):
    _, control = server
    assert db.fetch_one("SELECT 1 AS one")["one"] == 1
    before = failure_counts()
    control.stop()
    try:
        with pytest.raises(DatabaseUnavailable, match="not reachable") as failed:
            db.fetch("SELECT 1 AS one")
        assert not isinstance(failed.value, DatabaseBusy)
        assert failure_counts()["down"] > before["down"] and failure_counts()["busy"] == before["busy"]
    finally:
        control.start()
    wait_until(lambda: db.fetch_one("SELECT 1 AS one")["one"] == 1, timeout=30)


def test_a_page_says_busy_and_reads_again_in_either_language(db, app_env):
    """Any page's read (ui.common.read) on a busy pool: a translated "busy, read again" note, not "no responde"."""
    app_env(db.dsn, LOCAL_ROLES="sre")
    at = AppTest.from_file("../dashboard.py", default_timeout=120)
    at.run()
    assert not at.exception
    sessions = []
    for lang, busy in (("es", "La base de datos está ocupada"), ("en", "The database is busy")):
        at = AppTest.from_file("../dashboard.py", default_timeout=120)  # the database opened above, cached
        at.query_params["lang"] = lang
        at.run()  # the session's first (default) page: nothing of it is looked at, so it is run before the pool is busy
        sessions.append((at, busy))
    st.cache_data.clear()  # every read of the page runs below goes to the pool: none is served from the runs above
    errors: list = []
    # busy for both page runs: each run waits out the pool (3 s) for every read it makes, the change follower's
    # status included
    with slow_readers(db, POOL_SIZE, errors):
        for at, busy in sessions:
            at.switch_page("app_pages/sweeps.py").run()
            assert not at.exception, at.exception
            assert not at.error, [e.value for e in at.error]
            assert any(busy in w.value and " 5 s" in w.value for w in at.warning), [w.value for w in at.warning]
    assert not errors
