"""The change follower (core/capture) on the real embedded server with wal_level = logical, driven by stock
PostgresStore writes: its documents-per-prefix aggregate equals a recount from `store`, also across SIGKILLs."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from langgraph.store.postgres import PostgresStore

from core.capture.follower import PAUSE_ENV, Follower

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def capture_db(create_database):
    dsn = create_database(migrated=True, prefix="capture")
    with PostgresStore.from_conn_string(dsn) as store:
        store.setup()
    follower = Follower(dsn)
    follower.setup()
    yield dsn, follower
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
            (follower.slot,),
        )


def follower_counts(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("SELECT prefix, documents FROM core_capture_prefix_counts").fetchall())


def recount(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("SELECT prefix, count(*) FROM store GROUP BY prefix").fetchall())


def catch_up(follower: Follower) -> None:
    for _ in range(100):
        if follower.run_once().transactions == 0:
            return
    raise AssertionError("follower did not catch up")


def workload(dsn: str, seed: int, n: int = 120) -> None:
    """Stock writes: puts (new, overwrite, with TTL), deletes, batched deletes and a TTL sweep."""
    rng = random.Random(seed)
    with PostgresStore.from_conn_string(dsn) as store:
        keys: list[tuple[tuple[str, ...], str]] = []
        for i in range(n):
            r = rng.random()
            if r < 0.6 or not keys:
                ns = ("clientes", f"C{rng.randrange(6)}", rng.choice(["prefs", "notas"]))
                key = f"k{rng.randrange(40)}"
                ttl = 0.001 if rng.random() < 0.2 else None  # 0.06 s: expired by the sweep below
                store.put(ns, key, {"i": i}, ttl=ttl)
                keys.append((ns, key))
            elif r < 0.75:
                ns, key = rng.choice(keys)
                store.put(ns, key, {"i": i, "again": True})  # overwrite: an UPDATE, same prefix
            elif r < 0.93:
                ns, key = keys.pop(rng.randrange(len(keys)))
                store.delete(ns, key)
            else:
                from langgraph.store.base import PutOp

                picked = [keys.pop(rng.randrange(len(keys))) for _ in range(min(3, len(keys)))]
                store.batch([PutOp(ns, key, None) for ns, key in picked])
        time.sleep(0.2)
        store.sweep_ttl()


def test_aggregate_equals_recount_after_mixed_writes(capture_db):
    dsn, follower = capture_db
    workload(dsn, seed=1)
    catch_up(follower)
    expected = recount(dsn)
    assert expected, "the workload left documents"
    assert follower_counts(dsn) == expected
    with psycopg.connect(dsn) as conn:  # and it agrees with what the triggers keep today
        triggers = dict(conn.execute("SELECT prefix, documents FROM core_prefix_counts").fetchall())
    assert triggers == expected
    workload(dsn, seed=2)
    catch_up(follower)
    assert follower_counts(dsn) == recount(dsn)


def _start_follower(dsn: str, pause: str | None, marker: Path) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop(PAUSE_ENV, None)
    if pause:
        env[PAUSE_ENV] = pause
        env[PAUSE_ENV + "_FILE"] = str(marker)
    return subprocess.Popen(
        [sys.executable, "-m", "core.capture.follower", dsn],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(marker.with_suffix(".log"), "w"),
    )


def _wait_for(marker: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not marker.exists():
        assert proc.poll() is None, marker.with_suffix(".log").read_text()
        assert time.monotonic() < deadline, "the follower never reached its pause point"
        time.sleep(0.05)


def _position(dsn: str) -> list:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT slot_name, lsn::text FROM core_capture_position").fetchall()


def _slot_lsn(dsn: str, slot: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
        assert row is not None
        return str(row[0])


@pytest.mark.parametrize("point", ["after_apply", "mid_batch"])
def test_sigkill_then_restart_counts_once(capture_db, tmp_path, point):
    dsn, follower = capture_db
    workload(dsn, seed=3)
    marker = tmp_path / f"{point}.reached"
    before = _slot_lsn(dsn, follower.slot)
    proc = _start_follower(dsn, point, marker)
    try:
        _wait_for(marker, proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    # Killed with the slot not advanced: the batch is still in the slot.
    assert _slot_lsn(dsn, follower.slot) == before
    with psycopg.connect(dsn) as conn:
        applied = conn.execute("SELECT count(*) FROM core_capture_prefix_counts").fetchone()
    assert recount(dsn), "the workload left documents"
    stored = _position(dsn)[0][1]
    if point == "after_apply":  # committed before the kill: counts and position, slot behind them
        assert applied is not None and applied[0] > 0 and stored != before
    else:  # the open transaction died with the process
        assert applied == (0,) and stored == before
    workload(dsn, seed=4)  # the agents keep writing while the follower is down
    proc = _start_follower(dsn, None, marker)
    try:
        deadline = time.monotonic() + 60
        while follower_counts(dsn) != recount(dsn):
            assert proc.poll() is None
            assert time.monotonic() < deadline, (follower_counts(dsn), recount(dsn))
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    catch_up(follower)
    assert follower_counts(dsn) == recount(dsn)
