"""The demo seed in the background: one seed per database even when two processes start at once
(the advisory lock), with its progress readable while it runs."""

from __future__ import annotations

import threading

import pytest
from conftest import settings_for

from core.demo.seed import ensure_demo
from core.demo.seed_progress import SEED_STEPS, SeedProgress

pytestmark = pytest.mark.slow  # two full demo seeds, each with its outage


def test_two_seeders_at_once_seed_only_once(db):
    """Two dashboards starting together: one seeds, the other waits on the lock, then skips."""
    settings = settings_for(db.dsn)
    progresses = [SeedProgress(), SeedProgress()]
    seen: list[tuple[str, str]] = []
    results: list = [None, None]

    def run(i: int) -> None:
        results[i] = ensure_demo(db, settings, progress=progresses[i], customers=16, days=3)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    while any(th.is_alive() for th in threads):  # sample the states the sidebar would show
        seen.append((progresses[0].state, progresses[1].state))
        threads[0].join(0.05)
    for th in threads:
        th.join()

    assert sorted(p.state for p in progresses) == ["done", "skipped"]
    assert sum(r is not None for r in results) == 1
    seeder = next(p for p in progresses if p.state == "done")
    assert seeder.summary is not None and seeder.step == "outage" and seeder.finished
    # the one that lost the race waited while the other seeded (a state the sidebar shows)
    assert any("waiting" in pair and "seeding" in pair for pair in seen)
    # the month's operations ran once, by the seeder only: its sweeps, its erasures in the register
    month = seeder.summary.month
    assert len(month.sweeps) == 1 and len(month.erasures) <= 2  # 3 days: one sweep (every 4 days)
    assert db.fetch_one("SELECT count(*) AS n FROM core_sweep_log WHERE trigger = 'demo'")["n"] == len(month.sweeps)
    assert db.fetch_one("SELECT count(*) AS n FROM core_erasure_register")["n"] == len(month.erasures)
    # a third call finds data and seeds nothing
    assert ensure_demo(db, settings, customers=6, days=3) is None


def test_progress_counts_every_customer_conversation(db):
    progress = SeedProgress()
    summary = ensure_demo(db, settings_for(db.dsn), progress=progress, customers=8, days=3)
    assert summary is not None and progress.state == "done"
    assert progress.started_at <= progress.finished_at
    # every step ran, in order, and each counted its items once (the customers' across the workers)
    assert list(progress.counted) == list(SEED_STEPS[:-1]) and progress.step == SEED_STEPS[-1]
    assert progress.counted["suppliers"] == summary.suppliers
    assert progress.counted["employees"] == summary.employees
    assert progress.counted["customers"] == summary.conversations - summary.suppliers - summary.employees > 8
