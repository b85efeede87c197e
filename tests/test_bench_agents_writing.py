"""bench/agents_writing.py, the agents bench_production --agents-write runs while the dashboard installs: it writes
through a stock PostgresStore at the rate asked, and leaves the database as it found it (the template stays the
template)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

from apptools import wait_until
from conftest import ROOT


def test_the_agents_write_then_leave_nothing(db):
    before = db.fetch_one("SELECT count(*) AS n FROM store", read_only=False)["n"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.agents_writing", db.dsn, "--rate", "200"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        # until 150 of its documents are in the table (under a second at 200 a second, once it has started)
        wait_until(
            lambda: (
                db.fetch_one(
                    "SELECT count(*) AS n FROM store WHERE prefix LIKE 'clientes.escritor-%'", read_only=False
                )["n"]
                >= 150
            ),
            timeout=60,
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    result = json.loads(out.strip().splitlines()[-1])
    assert result["writes"] >= 150 and result["rate"] <= 200 * 1.05, result
    assert db.fetch_one("SELECT count(*) AS n FROM store", read_only=False)["n"] == before
