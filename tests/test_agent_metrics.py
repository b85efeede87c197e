"""Agent-side Prometheus metrics of the dual saver: naming, bounded labels, and the endpoints of
running replicas during a real hang and a real stop of their PostgreSQL (embedded server)."""

from __future__ import annotations

import threading
import time
import urllib.request
import uuid

import psycopg
import pytest
from apptools import wait_until
from conftest import free_port, own_embedded_server
from langgraph.checkpoint.base import empty_checkpoint
from prometheus_client.parser import text_string_to_metric_families

from agent_memory_runtime import metrics
from agent_memory_runtime.dual_saver import DualCheckpointSaver
from core.migrate import migrate

DIMS = 64


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def value(samples: dict, name: str, **labels) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def test_names_follow_prometheus_conventions_and_labels_are_bounded():
    status = {
        "replica_id": "r1",
        "state": "degraded",
        "degraded_since": None,
        "buffered_ops": 3,
        "buffered_checkpoints": 2,
        "buffered_writes": 1,
        "last_success": None,
        "last_resync_error": "boom",
        "episodes_total": 4,
    }
    names = [m.name for m in metrics.status_metrics([status])]
    assert all(n.startswith("agent_memory_") for n in names)
    fams = {m.name: m for m in metrics.status_metrics([status])}
    assert fams["agent_memory_checkpoint_degraded"].samples[0].value == 1
    assert fams["agent_memory_checkpoint_resync_failing"].samples[0].value == 1
    assert fams["agent_memory_checkpoint_degraded_episodes"].type == "counter"
    # Customer or thread ids never become label values: odd names collapse to "other".
    for odd in ("cliente-C1.thread", "50%", "a_b'c", "x\x00y", "", "z" * 500, None):
        metrics.denied(odd, "HIGH")
        metrics.refused(odd)
    metrics.observe("C123", "thread-9", 0.01)
    from prometheus_client import REGISTRY

    text = {
        s.labels.get("tool") for m in REGISTRY.collect() if m.name == "agent_memory_guard_denials" for s in m.samples
    }
    assert "other" in text and not any(t and ("." in t or "%" in t or "'" in t) for t in text)
    assert (
        REGISTRY.get_sample_value(
            "agent_memory_checkpoint_call_duration_seconds_count", {"backend": "other", "op": "other"}
        )
        >= 1
    )


def test_bad_metrics_port_is_a_clear_error(monkeypatch):
    for bad in ("0", "70000", "many"):
        monkeypatch.setenv("AGENT_METRICS_PORT", bad)
        with pytest.raises(ValueError):
            metrics.configured_port()
    monkeypatch.setenv("AGENT_METRICS_PORT", "")
    assert metrics.configured_port() is None


@pytest.fixture(scope="module")
def metrics_server(tmp_path_factory):
    yield from own_embedded_server(tmp_path_factory, "agent-metrics-faults")


def new_db(base: str) -> str:
    name = f"am_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = psycopg.conninfo.make_conninfo(base, dbname=name)
    migrate(dsn, DIMS)
    return dsn


def keep_writing(saver: DualCheckpointSaver, stop: threading.Event, tag: str) -> None:
    """An agent replica's checkpoint traffic: a put every 0.1 s on a few threads."""
    n = 0
    while not stop.wait(0.1):
        config = {"configurable": {"thread_id": f"cliente-C{n % 5}-{tag}", "checkpoint_ns": ""}}
        cp = empty_checkpoint()
        try:
            saver.put(config, cp, {"source": "loop", "step": n}, {})
        except Exception:  # noqa: BLE001 - a flapping put is reported by the saver; keep the traffic
            pass
        n += 1


@pytest.mark.slow  # an outage drill
def test_replica_endpoints_report_degraded_during_hang_and_stop_and_zero_after_resync(metrics_server):
    base, control = metrics_server
    dsn = new_db(base)
    stop = threading.Event()
    savers, ports, workers = [], [], []
    for i in (1, 2):
        saver = DualCheckpointSaver(dsn, heartbeat_interval=0.5, replica_id=f"metrics-replica-{i}")
        port = free_port()
        assert metrics.start_metrics_server(saver, port, addr="127.0.0.1")
        savers.append(saver)
        ports.append(port)
        worker = threading.Thread(target=keep_writing, args=(saver, stop, f"r{i}"), daemon=True)
        worker.start()
        workers.append(worker)
    try:

        def degraded(port: int, rid: str) -> float | None:
            return value(scrape(port), "agent_memory_checkpoint_degraded", replica=rid)

        for port, saver in zip(ports, savers, strict=True):
            wait_until(lambda port=port, saver=saver: degraded(port, saver.replica_id) == 0, 20)
        wait_until(
            lambda: (
                (
                    metrics.REGISTRY.get_sample_value(
                        "agent_memory_checkpoint_call_duration_seconds_count", {"backend": "postgres", "op": "put"}
                    )
                    or 0
                )
                > 0
            ),
            20,
        )
        resynced_before = metrics.REGISTRY.get_sample_value("agent_memory_checkpoint_resynced_operations_total") or 0

        # Hung (SIGSTOP): every replica's endpoint says degraded, with what it buffers.
        control.hang()
        hung_at = time.monotonic()
        try:
            for port, saver in zip(ports, savers, strict=True):
                wait_until(lambda port=port, saver=saver: degraded(port, saver.replica_id) == 1, 30)
            print(f"hang: all endpoints degraded after {time.monotonic() - hung_at:.2f} s")
            wait_until(
                lambda: (
                    (
                        value(
                            scrape(ports[0]),
                            "agent_memory_checkpoint_buffered_checkpoints",
                            replica=savers[0].replica_id,
                        )
                        or 0
                    )
                    > 0
                ),
                20,
            )
            since = value(
                scrape(ports[0]),
                "agent_memory_checkpoint_degraded_since_timestamp_seconds",
                replica=savers[0].replica_id,
            )
            assert since and abs(since - time.time()) < 120
        finally:
            control.resume()
        for saver in savers:
            assert saver.wait_for("healthy", 60)
        for port, saver in zip(ports, savers, strict=True):
            wait_until(lambda port=port, saver=saver: degraded(port, saver.replica_id) == 0, 30)

        # Stopped: the same, and the endpoints keep answering while PostgreSQL is down.
        control.stop()
        stopped_at = time.monotonic()
        try:
            for port, saver in zip(ports, savers, strict=True):
                wait_until(lambda port=port, saver=saver: degraded(port, saver.replica_id) == 1, 30)
            print(f"stop: all endpoints degraded after {time.monotonic() - stopped_at:.2f} s")
        finally:
            control.start()
        for saver in savers:
            assert saver.wait_for("healthy", 60)
        for port, saver in zip(ports, savers, strict=True):
            wait_until(lambda port=port, saver=saver: degraded(port, saver.replica_id) == 0, 30)
            wait_until(
                lambda port=port, saver=saver: (
                    value(scrape(port), "agent_memory_checkpoint_buffered_operations", replica=saver.replica_id) == 0
                ),
                30,
            )
        after = scrape(ports[0])
        assert value(after, "agent_memory_checkpoint_resynced_operations_total") > resynced_before
        assert value(after, "agent_memory_checkpoint_resync_duration_seconds_count") >= 2
        assert value(after, "agent_memory_checkpoint_degraded_episodes_total", replica=savers[0].replica_id) >= 2
        assert (
            value(after, "agent_memory_checkpoint_call_duration_seconds_count", backend="memory", op="put") or 0
        ) > 0
        # No thread id in any label value.
        assert not any("cliente-" in v for _, labels in after for _, v in labels)
    finally:
        stop.set()
        for worker in workers:
            worker.join(10)
        for saver in savers:
            metrics.unregister(saver)
            saver.close()


WORKER = """
import os, sys, time
from agent_memory_runtime import metrics
from agent_memory_runtime.dual_saver import DualCheckpointSaver
saver = DualCheckpointSaver(sys.argv[1], heartbeat_interval=0.5, replica_id=sys.argv[2])
serving = metrics.start_metrics_server(saver, int(sys.argv[3]), addr="127.0.0.1")
print("serving" if serving else "not serving", flush=True)
metrics.observe("postgres", "put", 0.003)
sys.stdin.read()  # until the test closes stdin
saver.close()
"""


@pytest.mark.slow  # worker processes
def test_multiprocess_mode_one_endpoint_for_every_worker(db, tmp_path):
    """PROMETHEUS_MULTIPROC_DIR: two worker processes, one port; the endpoint shows both replicas."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    mp_dir = tmp_path / "prom"
    mp_dir.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(mp_dir)}
    port = free_port()
    workers = []
    try:
        for i in (1, 2):
            proc = subprocess.Popen(
                [sys.executable, "-c", WORKER, db.dsn, f"worker-{i}", str(port)],
                cwd=root,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            workers.append(proc)
            workers[-1].first_line = proc.stdout.readline().strip()
        assert [w.first_line for w in workers] == ["serving", "not serving"]

        def both_healthy():
            s = scrape(port)
            return (
                all(value(s, "agent_memory_checkpoint_degraded", replica=f"worker-{i}") == 0 for i in (1, 2))
                and value(s, "agent_memory_checkpoint_call_duration_seconds_count", backend="postgres", op="put") == 2
            )

        wait_until(both_healthy, 20)
    finally:
        for proc in workers:
            proc.stdin.close()
            proc.wait(20)


def test_a_closed_saver_leaves_the_endpoint(db):
    """A closed saver persists nothing any more: its endpoint must not keep saying it is ok (a stale
    "ok" on the Degradation page, seen when another replica's endpoint served a closed test saver)."""
    saver = DualCheckpointSaver(db.dsn, heartbeat_interval=0.5, replica_id="metrics-closed")
    other = DualCheckpointSaver(db.dsn, heartbeat_interval=0.5, replica_id="metrics-still-open")
    port = free_port()
    try:
        assert metrics.start_metrics_server(other, port, addr="127.0.0.1")
        metrics.register(saver)
        wait_until(lambda: value(scrape(port), "agent_memory_checkpoint_degraded", replica="metrics-closed") == 0, 10)
        saver.close()
        after = scrape(port)
        assert value(after, "agent_memory_checkpoint_degraded", replica="metrics-closed") is None
        assert value(after, "agent_memory_checkpoint_degraded", replica="metrics-still-open") == 0
    finally:
        saver.close()  # closing twice is harmless
        other.close()
