"""Smoke run of the many-sessions benchmark (bench/bench_sessions.py) on the demo database: a real dashboard process,
sessions over Streamlit's websocket protocol (bench/st_client.py) opening every page and rerunning the fragments
the server asks for, as browsers do. Every run must finish without an exception; timings are measured by the
benchmark, never asserted here."""

from __future__ import annotations

from bench import bench_sessions
from tests.conftest import DIMS


def test_sessions_open_every_page_and_refresh_the_degradation_page(demo_db):
    level = bench_sessions.run_level(
        demo_db.dsn,
        DIMS,
        3,
        duration=20,
        ramp=1,
        think=(0.5, 1.0),
        refresh_every=3,
        seed=1,
        extra_env={},
        min_reruns=2,  # the Degradation session stays until its fragment reran twice, however slow the pages
    )
    assert level.failures == []
    assert set(bench_sessions.PAGES) <= set(level.page_s), sorted(level.page_s)  # the two browsing sessions
    assert len(level.page_s["(first page)"]) == 3
    assert len(level.fragment_s["every 5 s"]) >= 2  # the Degradation page's live part, on its own
    assert level.rss_peak_mb > level.rss_idle_mb > 0 and level.dashboard_cpu_s > 0
    text = bench_sessions.report([level], "header")
    assert "| 3 |" in text and "degradation" in text
