"""A server that answers is not "not reachable" (issue 51 #7): a deadlock, a serialization failure, a backend ended by
pg_terminate_backend and a session ended by idle_session_timeout are each reported as what they are, with their own
kind (core.db.failure_counts, the Prometheus label), never counted as "down", and the shared pool is kept. Every
failure is a real one on the real server: two connections locking each other's rows, a concurrent update under
REPEATABLE READ, the backend terminated from another connection, a session left idle past its timeout."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from core.db import Database, DatabaseUnavailable, failure_counts


def counted(before: dict[str, int]) -> dict[str, int]:
    """The kinds counted since `before`, with how many."""
    return {k: n - before.get(k, 0) for k, n in failure_counts().items() if n - before.get(k, 0)}


@pytest.fixture
def rows(db: Database) -> Database:
    db.execute("CREATE TABLE kinds_probe (id int PRIMARY KEY, v int NOT NULL)")
    db.execute("INSERT INTO kinds_probe VALUES (1, 0), (2, 0)")
    return db


def test_a_real_deadlock_is_a_conflict_not_down(rows):
    db, pool, before = rows, rows.pool, failure_counts()
    locked = threading.Barrier(2)
    errors: list[BaseException] = []

    def lock_then_take(first: int, second: int) -> None:
        try:
            with db.connection() as conn, conn.transaction():
                conn.execute("UPDATE kinds_probe SET v = v + 1 WHERE id = %s", (first,))
                locked.wait(10)
                conn.execute("UPDATE kinds_probe SET v = v + 1 WHERE id = %s", (second,))
        except Exception as exc:  # noqa: BLE001 - kept for the assertions
            errors.append(exc)

    threads = [threading.Thread(target=lock_then_take, args=a) for a in ((1, 2), (2, 1))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(errors) == 1, errors  # PostgreSQL picks one victim; the other transaction commits
    (error,) = errors
    assert isinstance(error, DatabaseUnavailable) and isinstance(error.__cause__, psycopg.errors.DeadlockDetected)
    said = str(error)
    assert "not reachable" not in said and "deadlock" in said and "40P01" in said, said
    assert counted(before) == {"conflict": 1}
    assert db.pool is pool  # the server answers: nothing to rebuild


def test_a_real_serialization_failure_is_a_conflict_not_down(rows):
    db, pool, before = rows, rows.pool, failure_counts()
    with pytest.raises(DatabaseUnavailable) as failed:
        with db.connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            assert conn.execute("SELECT v FROM kinds_probe WHERE id = 1").fetchone()["v"] == 0
            with psycopg.connect(db.dsn, autocommit=True) as other:  # a concurrent update, committed
                other.execute("UPDATE kinds_probe SET v = v + 1 WHERE id = 1")
            conn.execute("UPDATE kinds_probe SET v = v + 10 WHERE id = 1")
    assert isinstance(failed.value.__cause__, psycopg.errors.SerializationFailure)
    said = str(failed.value)
    assert "not reachable" not in said and "40001" in said and "could not serialize" in said, said
    assert counted(before) == {"conflict": 1}
    assert db.pool is pool
    assert db.fetch_one("SELECT v FROM kinds_probe WHERE id = 1")["v"] == 1  # the conflicting update was not kept


def test_a_backend_terminated_by_an_administrator_is_an_ended_session_not_down(rows):
    db, pool, before = rows, rows.pool, failure_counts()
    with pytest.raises(DatabaseUnavailable) as failed:
        with db.connection() as conn:
            pid = conn.info.backend_pid

            def terminate() -> None:
                with psycopg.connect(db.dsn, autocommit=True) as admin:
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))

            killer = threading.Timer(0.5, terminate)
            killer.start()
            conn.execute("SELECT pg_sleep(10)")
    killer.join()
    assert isinstance(failed.value.__cause__, psycopg.errors.AdminShutdown)
    said = str(failed.value)
    assert "not reachable" not in said and "57P01" in said and "administrator command" in said, said
    assert "answers" in said, said  # the probe after it: the server is up, only this session ended
    assert counted(before) == {"ended": 1}
    assert db.pool is pool
    assert db.fetch_one("SELECT count(*) AS n FROM kinds_probe")["n"] == 2  # the next access just works


def test_a_session_ended_by_idle_session_timeout_is_an_ended_session_not_down(rows):
    db, pool, before = rows, rows.pool, failure_counts()
    with pytest.raises(DatabaseUnavailable) as failed:
        with db.connection() as conn:
            conn.execute("SET idle_session_timeout = '300ms'")
            time.sleep(1.0)  # idle, outside any transaction, past the timeout: the server ends the session
            conn.execute("SELECT 1")
    assert isinstance(failed.value.__cause__, psycopg.errors.IdleSessionTimeout)
    said = str(failed.value)
    assert "not reachable" not in said and "57P05" in said and "idle-session timeout" in said, said
    assert counted(before) == {"ended": 1}
    assert db.pool is pool
    assert db.fetch_one("SELECT count(*) AS n FROM kinds_probe")["n"] == 2


def test_a_session_ended_by_idle_in_transaction_timeout_is_an_ended_session(rows):
    db, before = rows, failure_counts()
    with pytest.raises(DatabaseUnavailable) as failed:
        with db.connection() as conn:
            conn.execute("SET idle_in_transaction_session_timeout = '300ms'")
            with conn.transaction():
                conn.execute("SELECT 1")
                time.sleep(1.0)
                conn.execute("SELECT 1")
    said = str(failed.value)
    assert "not reachable" not in said and "25P03" in said and "idle-in-transaction" in said, said
    assert counted(before) == {"ended": 1}
