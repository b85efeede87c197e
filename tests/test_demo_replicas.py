"""Live demo replicas: real agents on their own dual saver, heartbeats the operations pages read."""

from __future__ import annotations

import threading

import pytest
from apptools import wait_until
from conftest import settings_for

from core.config import load_settings
from core.demo.seed import run_replica, start_replicas


def test_a_live_replica_converses_and_publishes_its_heartbeat(db):
    stop = threading.Event()
    result: list[int] = []
    worker = threading.Thread(
        target=lambda: result.append(
            run_replica(db, settings_for(db.dsn), "demo-replica-t", stop, every_s=0.1, customers=5, seed=1)
        )
    )
    worker.start()
    try:
        wait_until(
            lambda: (
                db.fetch_one(
                    "SELECT count(*) AS n FROM core_conversations WHERE thread_id LIKE "
                    "'cliente-%%-live-demo-replica-t-%%'"
                )["n"]
                >= 2
            ),
            20,
        )
        wait_until(
            lambda: (
                (
                    db.fetch_one("SELECT state FROM core_replica_heartbeat WHERE replica_id = 'demo-replica-t'") or {}
                ).get("state")
                == "healthy"
            ),
            10,
        )
        beat = db.fetch_one(
            "SELECT now() - updated_at AS age FROM core_replica_heartbeat WHERE replica_id = 'demo-replica-t'"
        )
        assert beat["age"].total_seconds() < 10
    finally:
        stop.set()
        worker.join(30)
    assert not worker.is_alive() and result and result[0] >= 2
    assert (
        db.fetch_one("SELECT state FROM core_replica_heartbeat WHERE replica_id = 'demo-replica-t'")["state"]
        == "stopped"
    )
    threads = db.fetch_one(
        "SELECT count(DISTINCT thread_id) AS n FROM checkpoints WHERE thread_id LIKE '%%-live-demo-replica-t-%%'"
    )["n"]
    assert threads >= 1


@pytest.mark.parametrize("value", ["-1", "many"])
def test_bad_replica_count_is_a_clear_error(monkeypatch, value):
    monkeypatch.setenv("DEMO_REPLICAS", value)
    with pytest.raises(ValueError, match="DEMO_REPLICAS"):
        load_settings({})


def test_replicas_default_on_embedded_off_with_a_dsn(monkeypatch):
    monkeypatch.delenv("DEMO_REPLICAS", raising=False)
    monkeypatch.delenv("PG_AGENTES", raising=False)
    assert load_settings({}).demo_replicas == 1
    monkeypatch.setenv("PG_AGENTES", "postgresql://x@127.0.0.1/agentes")
    assert load_settings({}).demo_replicas == 0


def test_closing_the_replicas_waits_for_every_saver_to_close(db):
    """`python -m core.demo --replicas N` stops on Ctrl-C or SIGTERM through LiveReplicas.close(): when it returns,
    every replica's saver has closed (its last heartbeat says stopped), with no sleep in between."""
    replicas = start_replicas(db, settings_for(db.dsn), 2, every_s=0.1, customers=5)
    ids = ("demo-replica-1", "demo-replica-2")
    states = "SELECT replica_id, state FROM core_replica_heartbeat WHERE replica_id = ANY(%s)"
    try:
        wait_until(
            lambda: (
                {r["state"] for r in db.fetch(states, (list(ids),))} == {"healthy"}
                and len(db.fetch(states, (list(ids),))) == 2
            ),
            30,
        )
    finally:
        closed = replicas.close()
    assert closed and not any(t.is_alive() for t in replicas.threads)
    assert {r["replica_id"]: r["state"] for r in db.fetch(states, (list(ids),))} == {i: "stopped" for i in ids}


def test_the_live_replicas_write_the_seeded_months_average_day(demo_db):
    """Issue 40: one turn every 4 s made "today" 15 times the month's average day. The replicas' pace is the seeded
    month's turns per day, measured on the seed (real agents' conversations), shared by the replicas."""
    from core.demo.seed import realistic_every_s

    month = demo_db.fetch_one(
        "SELECT sum(turns) AS turns FROM core_conversations WHERE thread_id NOT LIKE '%%-live-demo-replica-%%'"
    )
    assert month["turns"] > 100  # the seed's month: something to match
    per_day = month["turns"] / 30
    for count in (1, 3):
        every_s = realistic_every_s(demo_db, count)
        assert abs(count * 86_400 / every_s - per_day) < 1e-6 * per_day  # the replicas' day == the month's day
    assert realistic_every_s(demo_db, 1) > 4.0 * 10  # far from the old pace: a turn every 4 s


def test_without_a_month_to_match_the_replicas_keep_the_old_pace(db):
    from core.demo.seed import UNSEEDED_EVERY_S, realistic_every_s

    assert realistic_every_s(db, 2) == UNSEEDED_EVERY_S
