"""Database-side exporter: every metric compared with the rows behind it, the CLI served over HTTP,
a database that does not answer reported as agent_memory_db_up 0."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import psycopg
import pytest
from apptools import wait_until
from conftest import free_port
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from psycopg.rows import dict_row

from core.capture.follower import catch_up
from core.operations.exporter import DatabaseCollector, database_metrics, make_registry

ROOT = Path(__file__).resolve().parents[1]


def samples_of(metrics) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for m in metrics for s in m.samples}


def seed(db) -> None:
    db.execute("""
        INSERT INTO core_replica_heartbeat (replica_id, host, pid, state, heartbeat_interval_s, updated_at) VALUES
          ('r-ok', 'h', 1, 'healthy', 2, now()),
          ('r-deg', 'h', 2, 'degraded', 2, now() - interval '3 seconds'),
          ('r-silent', 'h', 3, 'healthy', 2, now() - interval '14.3 seconds'),
          ('r-stop', 'h', 4, 'stopped', 2, now() - interval '1 day')""")
    db.execute("""
        INSERT INTO store (prefix, key, value, created_at, updated_at, expires_at, ttl_minutes) VALUES
          ('clientes.C1', 'pref-talla', '{}', now(), now(), now() - interval '1 hour', 1),
          ('clientes.C1', 'pref-canal', '{}', now(), now(), now() + interval '1 day', 1),
          ('clientes.C2', 'pref-talla', '{}', now(), now(), now() - interval '2 hour', 1),
          ('clientes.C2', 'pref-canal', '{}', now(), now(), NULL, NULL),
          ('clientes.C2', 'pref-color', '{}', now(), now(), NULL, NULL),
          ('clientes.C2', 'pref-estilo', '{}', now(), now(), NULL, NULL),
          ('clientes.C2', 'pref-otro', '{}', now(), now(), NULL, NULL)""")
    db.execute("""
        INSERT INTO core_sweep_log (started_at, finished_at, trigger, host, status, dry_run) VALUES
          (now() - interval '3 hours', now() - interval '3 hours', 'scheduled', 'h', 'ok', false),
          (now() - interval '1 hour', now() - interval '1 hour', 'scheduled', 'h', 'error', false),
          (now() - interval '5 minutes', now(), 'manual', 'h', 'dry_run', true),
          (now() - interval '4 minutes', now(), 'scheduled', 'h', 'locked', false)""")
    db.execute("""
        INSERT INTO core_erasure_register (customer_id, namespace_prefix, operator, status, last_recheck_clean,
                                           requested_at) VALUES
          ('C7', 'clientes.C7', 'op', 'complete', true, now()),
          ('C8', 'clientes.C8', 'op', 'complete', false, now()),
          ('C9', 'clientes.C9', 'op', 'incomplete', NULL, now()),
          ('C10', 'clientes.C10', 'op', 'running', NULL, now() - interval '2 hours'),
          ('C11', 'clientes.C11', 'op', 'running', NULL, now())""")
    catch_up(db.dsn)  # the change follower applies the store writes (core/capture)


def test_every_metric_matches_the_rows(db):
    seed(db)
    with psycopg.connect(db.dsn, row_factory=dict_row) as conn:
        s = samples_of(database_metrics(conn))
    # and says how far it is: caught up just now, nothing running in this test
    assert s[("agent_memory_capture_running", ())] == 0 and s[("agent_memory_capture_slot_lost", ())] == 0
    assert (
        s[("agent_memory_capture_dead_letters", ())] == 0
    )  # every row applied (one: test_browser_capture_dead_letters)
    assert (
        0 <= s[("agent_memory_capture_lag_seconds", ())] < 60
        and s[("agent_memory_capture_retained_wal_bytes", ())] >= 0
    )
    assert s[("agent_memory_replicas", (("state", "healthy"),))] == 1
    assert s[("agent_memory_replicas", (("state", "degraded"),))] == 1
    assert s[("agent_memory_replicas", (("state", "silent"),))] == 1
    assert s[("agent_memory_replicas", (("state", "stopped"),))] == 1
    age = s[("agent_memory_replica_heartbeat_age_seconds", (("replica", "r-silent"), ("state", "silent")))]
    assert 14 < age < 60
    assert not any(k[0] == "agent_memory_replica_heartbeat_age_seconds" and ("replica", "r-stop") in k[1] for k in s)
    assert s[("agent_memory_store_expired_documents", (("root", "clientes"),))] == 2
    expired_sql = db.fetch_one("SELECT count(*) AS n FROM store WHERE expires_at < now()")["n"]
    assert sum(v for k, v in s.items() if k[0] == "agent_memory_store_expired_documents") == expired_sql
    # The last real run (dry runs and locked ones do not count) and the last good one.
    last = db.fetch_one(
        "SELECT extract(epoch FROM started_at)::float8 AS t FROM core_sweep_log WHERE status = 'error'"
    )["t"]
    assert s[("agent_memory_sweep_last_run_timestamp_seconds", (("status", "error"),))] == last
    ok = db.fetch_one("SELECT extract(epoch FROM started_at)::float8 AS t FROM core_sweep_log WHERE status = 'ok'")["t"]
    assert s[("agent_memory_sweep_last_success_timestamp_seconds", ())] == ok
    assert s[("agent_memory_erasure_requests_incomplete", ())] == 2  # C9 incomplete, C10 running for 2 h
    assert s[("agent_memory_erasure_data_back_requests", ())] == 1  # C8
    assert s[("agent_memory_customers_over_schema", ())] == 1  # C2 has 5
    # Never a customer or thread id as a label value.
    assert not any(v.startswith("C") and v[1:].isdigit() for _, labels in s for _, v in labels)


def test_empty_database_exports_zeros(db):
    with psycopg.connect(db.dsn, row_factory=dict_row) as conn:
        s = samples_of(database_metrics(conn))
    assert s[("agent_memory_sweep_last_success_timestamp_seconds", ())] == 0
    assert not any(k[0] == "agent_memory_sweep_last_run_timestamp_seconds" for k in s)
    assert s[("agent_memory_erasure_requests_incomplete", ())] == 0


def test_unreachable_database_is_db_up_zero(tmp_path):
    dead = f"host={tmp_path} port=1 dbname=x user=x"
    s = samples_of(DatabaseCollector(dead).collect())
    assert s[("agent_memory_db_up", ())] == 0
    assert not any(k[0] == "agent_memory_replicas" for k in s)


@pytest.mark.slow  # a new Python process
def test_cli_serves_the_metrics_and_rejects_a_bad_port(db):
    seed(db)
    port = free_port()
    env = {**os.environ, "PG_AGENTES": db.dsn}
    proc = subprocess.Popen(
        [sys.executable, "-m", "core.operations.exporter", "--port", str(port), "--addr", "127.0.0.1"],
        cwd=ROOT,
        env=env,
    )
    try:

        def scraped():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    return r.read().decode()
            except OSError:
                return None

        wait_until(lambda: scraped() is not None, 30)
        text = scraped()
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        assert fams["agent_memory_db_up"].samples[0].value == 1
        assert fams["agent_memory_customers_over_schema"].samples[0].value == 1
    finally:
        proc.terminate()
        proc.wait(10)
    bad = subprocess.run(
        [sys.executable, "-m", "core.operations.exporter", "--port", "70000"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "port out of range" in bad.stderr


def test_registry_exposes_valid_text(db):
    text = generate_latest(make_registry(db.dsn)).decode()
    assert "agent_memory_db_up 1.0" in text


def test_exporter_role_reads_everything_and_writes_nothing(db):
    seed(db)
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute((ROOT / "deploy" / "exporter-grants.sql").read_text())
    role_dsn = psycopg.conninfo.make_conninfo(db.dsn, user="agent_memory_exporter")
    s = samples_of(DatabaseCollector(role_dsn).collect())
    assert s[("agent_memory_db_up", ())] == 1
    assert s[("agent_memory_customers_over_schema", ())] == 1
    with psycopg.connect(role_dsn) as conn, pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        conn.execute("DELETE FROM core_sweep_log")
    with psycopg.connect(role_dsn) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SET TRANSACTION READ WRITE")
        conn.execute("DELETE FROM core_sweep_log")
    assert db.fetch_one("SELECT count(*) AS n FROM core_sweep_log")["n"] == 4


def test_attribution_coverage_is_exported_from_the_background(db):
    from core.privacy.subjects import coverage

    db.execute("""INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, checkpoint, metadata)
                  VALUES ('cliente-C1-1', '', '1', '{}', '{}'), ('huerfano-9', '', '1', '{}', '{}')""")
    collector = DatabaseCollector(db.dsn)

    def exported():
        return samples_of(collector.collect()).get(("agent_memory_attribution_threads", ()))

    wait_until(lambda: exported() is not None, 30)
    s = samples_of(collector.collect())
    expected = coverage(db)
    assert s[("agent_memory_attribution_threads", ())] == expected.threads == 2
    assert s[("agent_memory_attribution_unattributed_threads", ())] == expected.unattributed_threads
    assert s[("agent_memory_attribution_unattributed_bytes", ())] == expected.unattributed_bytes
    assert s[("agent_memory_attribution_computed_timestamp_seconds", ())] > 0


def test_the_data_back_alert_counts_what_the_erasure_register_shows_as_data_back(db):
    """Issue 25 point 5: one definition. Erased again since, or never complete, is not "data back"."""
    from core.privacy import erasure_register

    db.execute("""
        INSERT INTO core_erasure_register (customer_id, namespace_prefix, operator, status, last_recheck_clean,
                                           requested_at) VALUES
          ('C8', 'clientes.C8', 'op', 'complete', false, now() - interval '1 day'),
          ('C8', 'clientes.C8', 'op', 'complete', true, now()),
          ('C12', 'clientes.C12', 'op', 'interrupted', false, now()),
          ('C13', 'clientes.C13', 'op', 'complete', false, now())""")
    with psycopg.connect(db.dsn, row_factory=dict_row) as conn:
        s = samples_of(database_metrics(conn))
    shown = erasure_register.register(db)
    assert list(shown["customer_id"][shown["outcome"] == erasure_register.DATA_BACK]) == ["C13"]
    assert s[("agent_memory_erasure_data_back_requests", ())] == 1
