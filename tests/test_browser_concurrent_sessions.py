"""Real browser (Debian chromium) with 24 other people on the same dashboard process (issue 41): while 24 sessions
of Streamlit's own websocket protocol (bench/st_client.py, as bench_sessions drives them) keep opening every page
and rerunning the fragments the server asks for, a person in a real browser opens every page of the navigation;
no page shows an exception, an error banner, or a busy pool reported as an outage. The websocket sessions count
their own failures (a run that did not finish, an exception or an error element in what the server sent)."""

from __future__ import annotations

import asyncio
import re
import threading

import pytest
from playwright.sync_api import expect

from bench.bench_sessions import PAGES, Level, drive
from bench.st_server import wait_painted
from tests.conftest import start_streamlit, stop_streamlit

pytestmark = pytest.mark.browser

SESSIONS = 24  # and the browser: 25 people
LOAD_S = 60  # steady load after the sessions open (over RAMP_S)
RAMP_S = 10
OUTAGE = re.compile(r"no responde|not reachable|pool .* is closed", re.IGNORECASE)


@pytest.fixture(scope="module")
def server(demo_db):
    proc, url = start_streamlit({"PG_AGENTES": demo_db.dsn})
    yield url
    stop_streamlit(proc)


def test_twenty_five_people_at_once_every_page_renders(page, server, screenshot):
    level = Level(SESSIONS)
    load = threading.Thread(
        target=lambda: asyncio.run(
            drive(server, level, duration=LOAD_S, ramp=RAMP_S, think=(2.0, 6.0), refresh_every=5, seed=41)
        ),
        name="websocket-sessions",
    )
    load.start()
    try:
        page.goto(server)
        expect(page.get_by_test_id("stSidebarNav")).to_be_visible(timeout=60_000)
        page.wait_for_timeout(RAMP_S * 1000)  # every session open: the browser's pages are read under the load
        for path in PAGES:
            page.goto(f"{server}/{path}")
            main = page.get_by_test_id("stMain")
            expect(main.locator("h1").first).to_be_visible(timeout=60_000)
            wait_painted(page)  # the run is over and painted
            expect(page.get_by_test_id("stException")).to_have_count(0)
            expect(page.get_by_test_id("stAlertContentError")).to_have_count(0)
            assert not OUTAGE.search(main.inner_text()), (path, main.inner_text()[:2000])
            screenshot(f"concurrent-{path}")
    finally:
        load.join(timeout=LOAD_S + RAMP_S + 180)
    assert not load.is_alive(), "the websocket sessions did not end"
    assert level.failures == [], level.failures[:5]
    loads = level.all_pages()
    # every session opened its first page, and the people moving between pages opened every page many times
    assert len(level.page_s.get("(first page)", [])) == SESSIONS, {k: len(v) for k, v in level.page_s.items()}
    assert all(len(level.page_s.get(p, [])) >= 3 for p in PAGES), {k: len(v) for k, v in level.page_s.items()}
    assert len(loads) >= SESSIONS * 4, len(loads)
