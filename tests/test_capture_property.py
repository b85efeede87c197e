"""Issue 37's property: a random mix of stock writes from two processes (store puts with and without TTL, deletes,
graph turns with subgraphs, delete_thread, the agents' own turns, the sweep's TTL deletes and retention, a prune, an
erasure) while the change follower is SIGKILLed at random points and restarted; once it has caught up, every
aggregate equals a full recount from the tables (core.capture.verify). On a database written by our agents and on
one written by the memory article's agents."""

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

from core.capture.follower import PAUSE_ENV, catch_up, drop_slot
from core.capture.verify import differences

ROOT = Path(__file__).resolve().parent.parent
OPS = 14  # random operations per writer process


def _follower(dsn: str, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(PAUSE_ENV)}
    return subprocess.Popen(
        [sys.executable, "-m", "core.capture.follower", dsn, "--idle-sleep", "0.05"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(log, "a"),
    )


def _applied_lsn(dsn: str) -> str | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT max(lsn)::text FROM core_capture_position").fetchone()
    return row[0] if row else None


def kill_while_two_processes_write(dsn: str, agents: str, seed: int, tmp_path: Path) -> tuple[int, int]:
    """Two writer processes; the follower killed every 0.1-1.5 s (seeded) and started again. Returns (kills, kills
    after which the follower had moved on: it applied something between two kills)."""
    rng = random.Random(seed)
    catch_up(dsn)  # the slot and the recount
    writers = [
        subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "capture_writes.py"), dsn, str(seed + w), str(OPS), agents],
            cwd=ROOT,
            stderr=open(tmp_path / f"writer{w}.log", "w"),
        )
        for w in (1, 2)
    ]
    log = tmp_path / "follower.log"
    kills = moved = 0
    follower = _follower(dsn, log)
    last = _applied_lsn(dsn)
    try:
        while any(w.poll() is None for w in writers):
            time.sleep(rng.uniform(0.1, 1.5))
            follower.send_signal(signal.SIGKILL)
            follower.wait()
            kills += 1
            now = _applied_lsn(dsn)
            moved += now != last
            last = now
            follower = _follower(dsn, log)
    finally:
        follower.send_signal(signal.SIGKILL)
        follower.wait()
        for w in writers:
            w.wait(timeout=300)
    for w in (1, 2):
        assert writers[w - 1].returncode == 0, (tmp_path / f"writer{w}.log").read_text()[-3000:]
    return kills, moved


@pytest.mark.slow
@pytest.mark.parametrize("agents", ["ours", "article"])
def test_every_aggregate_equals_a_recount_after_random_writes_and_kills(create_database, agents, tmp_path):
    dsn = create_database(migrated=True, prefix=f"prop_{agents}")
    try:
        kills, moved = kill_while_two_processes_write(
            dsn, agents, seed=37 if agents == "ours" else 38, tmp_path=tmp_path
        )
        print(f"{agents}: follower killed {kills} times, {moved} of them after it had applied something")
        catch_up(dsn, 120)
        assert differences(dsn) == {}
        assert kills >= 5 and moved >= 2, (kills, moved)  # it was killed while it had work, not only while idle
        with psycopg.connect(dsn) as conn:
            counts = conn.execute(
                "SELECT (SELECT count(*) FROM store) AS documents, (SELECT count(*) FROM checkpoints) AS checkpoints, "
                "(SELECT count(*) FROM core_erasure_register) AS erasures, "
                "(SELECT count(*) FROM core_sweep_log WHERE status = 'ok') AS sweeps"
            ).fetchone()
        print(f"{agents}: documents, checkpoints, erasures, sweeps = {counts}")
        assert counts[0] > 20 and counts[1] > 20, counts  # the comparison is not between two empty sets
        assert counts[2] + counts[3] >= 1, counts  # a sweep or an erasure ran among the writes
    finally:
        drop_slot(dsn)
