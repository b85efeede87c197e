"""The demo seed in the background: one seed per database even when two processes start at once
(the advisory lock), with its progress readable while it runs."""

from __future__ import annotations

import threading
import time

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
    assert progress.counted["customers"] == summary.customer_conversations > 8


def test_every_page_says_the_demo_is_seeding_and_shows_what_arrived(db, app_env):
    """While the demo seeds (the dashboard's own background seed, running), every page's main area says so with the
    seed's progress, Memoria says its store is being seeded (never "empty, seed the demo"), the figures that arrived
    are there and grow on the page's next read; once done, the message goes (issue 40)."""
    from core.capture.background import stop_follower

    # the embedded default: the change follower runs in the dashboard's process (Memoria's totals are its aggregates)
    app_env(db.dsn, SEED_DEMO="1", LOCAL_ROLES="manager,sre,dpo", CAPTURE_FOLLOWER="1")
    try:
        seeding_pages_show_what_arrived(db)
    finally:
        stop_follower(db.dsn)


def seeding_pages_show_what_arrived(db) -> None:
    import re

    from apptools import as_int, metric, wait_until
    from streamlit.testing.v1 import AppTest

    from core.capture.follower import catch_up
    from core.demo.progress import start_background_seed

    # 200 customers: the seed is still at its customers' step, on a loaded machine too, while the pages below are read
    # (the checks take seconds, that step about 20 s here); 3 days: the month's operations after it (a sweep every 4
    # days, each with its physical scan) took 50 of this test's 78 s with 30, and nothing here reads them.
    progress = start_background_seed(db, settings_for(db.dsn), customers=200, days=3)
    wait_until(lambda: progress.step == "customers" and progress.done >= 3, timeout=120)

    def page(path: str) -> AppTest:
        at = AppTest.from_file("../dashboard.py", default_timeout=120)
        at.run()
        at.switch_page(path).run()
        assert not at.exception, (path, at.exception)
        return at

    def banner(at: AppTest) -> str:
        texts = [p.proto.text for p in at.main.get("progress")] + [i.value for i in at.main.info]
        return next((x for x in texts if x.startswith("Sembrando los datos de demostración")), "")

    pages = ["memory", "preferences", "sweeps", "checkpoints", "degradation", "erasure", "erasure_register", "access"]
    for name in pages:
        at = page(f"app_pages/{name}.py")
        assert re.match(r"Sembrando los datos de demostración: .+\. Las cifras de esta página", banner(at)), name
        if name == "memory":
            infos = [i.value for i in at.main.info]
            assert not any("siembre la demo" in i or "está vacía" in i for i in infos), infos
            documents = as_int(metric(at, "Documentos guardados"))
    # the figures arrive while it seeds: read again later, the page shows more
    wait_until(lambda: db.fetch_one("SELECT count(*) AS n FROM store")["n"] > documents + 5, timeout=120)
    from ui.common import forget_all

    catch_up(db.dsn)  # the follower has applied those writes to its aggregates
    forget_all()  # what the page's periodic re-read does (ui.common.read_fresh_while_seeding)
    at = page("app_pages/memory.py")
    assert progress.running and as_int(metric(at, "Documentos guardados")) > documents
    wait_until(lambda: progress.finished, timeout=300)
    assert progress.state == "done"
    at = page("app_pages/memory.py")
    assert banner(at) == "" and as_int(metric(at, "Documentos guardados")) > 0


@pytest.mark.parametrize("lang", ["es", "en"])
def test_the_sidebar_says_the_pages_count_of_conversations_and_the_seeds_whole_time(db, app_env, lang):
    """Issue 54 (finding 8): the sidebar's "seeded in N s: ... M conversations" is the Preferences page's count of
    conversations (threads with a human message) and the seed's whole time, from the dashboard starting it (the
    agents' imports included) to its end (the aggregates' catch-up included)."""
    from datetime import date, timedelta

    from apptools import as_int, metric, wait_until
    from streamlit.testing.v1 import AppTest

    from core.demo.progress import start_background_seed
    from core.memory import preferences
    from ui.i18n import CATALOGUES

    app_env(db.dsn, SEED_DEMO="1", LOCAL_ROLES="manager,sre,dpo")
    before = time.time()
    progress = start_background_seed(db, settings_for(db.dsn), customers=8, days=3)
    after_start = time.time()
    wait_until(lambda: progress.finished, timeout=300)
    seen_finished = time.time()
    assert progress.state == "done", progress.error
    summary = progress.summary
    # the whole time: from the call that started it to its end, nothing before or after left out
    assert before <= progress.started_at <= after_start and progress.finished_at <= seen_finished
    assert summary.seconds == pytest.approx(progress.finished_at - progress.started_at, abs=1e-6)

    today = date.today()
    assert summary.conversations == preferences.conversations(db, today - timedelta(days=29), today)

    at = AppTest.from_file("../dashboard.py", default_timeout=120)
    at.query_params["lang"] = lang
    at.run()
    at.switch_page("app_pages/preferences.py").run()
    assert not at.exception
    done = CATALOGUES[lang]["seed_done"].format(
        s=summary.seconds, turns=summary.turns, conversations=summary.conversations
    )
    assert done in [c.value for c in at.sidebar.caption]
    label = CATALOGUES[lang]["conversations"]
    assert as_int(metric(at, label)) == summary.conversations
