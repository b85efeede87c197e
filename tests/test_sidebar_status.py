"""The sidebar's database status never contradicts a newer read of the same run (issue 54, finding 8): its probe is
shared for PROBE_INTERVAL_S, so after PostgreSQL comes back a page could read "all replicas persist" under a sidebar
still saying "NOT reachable" from a probe seconds older. A page's answered read now outdates a failed probe: the
sidebar probes again (once, only then) and says what the page saw. An embedded server of its own (it is stopped)."""

from __future__ import annotations

import time

import psycopg
import pytest
from apptools import wait_until
from conftest import DIMS, dsn_for, own_embedded_server
from streamlit.testing.v1 import AppTest

from core.migrate import migrate
from ui.common import PROBE_INTERVAL_S
from ui.i18n import CATALOGUES

pytestmark = pytest.mark.slow  # an outage drill, and a wait past the shared probe's interval

APP = "../dashboard.py"
PAGE = "app_pages/degradation.py"


@pytest.fixture(scope="module")
def outage_server(tmp_path_factory):
    yield from own_embedded_server(tmp_path_factory, "sidebar-status")


def answers(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=1) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def sleep_until(due: float) -> None:
    time.sleep(max(0.0, due - time.monotonic()))


def db_status(at: AppTest) -> list[str]:
    return [c.value for c in at.sidebar.caption if c.value.startswith(":")]


@pytest.mark.parametrize("lang", ["es", "en"])
def test_the_sidebar_follows_a_page_that_read_the_database_after_its_probe(outage_server, app_env, lang):
    base, control = outage_server
    name = f"sidebar_{lang}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = dsn_for(base, name)
    migrate(dsn, DIMS)
    app_env(dsn, LOCAL_ROLES="sre")
    strings = CATALOGUES[lang]
    down, ok = strings["db_down"].split("{")[0], strings["db_ok"].split("(")[0]
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["lang"] = lang
    at.run()
    at.switch_page(PAGE).run()
    # The shared probe was taken (its interval counts from before it) within the runs above: due again after this
    # (the same clock as ui.shared.SharedReading's). The server's stop is part of the wait.
    probe_due = time.monotonic() + PROBE_INTERVAL_S + 0.2
    assert not at.exception
    assert any(ok in s for s in db_status(at)), db_status(at)

    control.stop()
    try:
        sleep_until(probe_due)  # the shared probe is due again: taken while the server is down
        at.run()
        # past the page's own shared sample taken during this run (app_pages/degradation.py SHARE_S); the restart
        # below is part of the wait
        sample_due = time.monotonic() + 2.1
        assert any(down in s for s in db_status(at)), db_status(at)
    finally:
        control.start()
    wait_until(lambda: answers(dsn), timeout=30)
    sleep_until(sample_due)
    at.run()  # seconds later, within the failed probe's interval: the page reads the database again
    assert not at.exception
    assert not at.error, [e.value for e in at.error]
    shown = db_status(at)
    assert not any(down in s for s in shown) and any(ok in s for s in shown), (shown, at.sidebar)
