"""The embedded server of the README's first command: started with logical decoding (a restart on a new data folder),
and stopped when the process that started it exits, restart or not (the library's exit hook stops it)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent

START = """
import sys
from pathlib import Path
import psycopg
from core.db import embedded_dsn
with psycopg.connect(embedded_dsn(Path(sys.argv[1]))) as conn:
    print(conn.execute("SHOW wal_level").fetchone()[0])
"""


def postmasters(pgdata: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["name"] == "postgres" and str(pgdata) in cmdline:
            found.append(proc)
    return found


@pytest.mark.slow
def test_a_new_data_folders_server_is_restarted_for_logical_decoding_and_stopped_at_exit(tmp_path):
    for run in ("new folder: initdb, then a restart for wal_level", "the same folder again: no restart"):
        started = subprocess.run(
            [sys.executable, "-c", START, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert started.returncode == 0, started.stderr[-3000:]
        assert started.stdout.split() == ["logical"], run
        deadline = time.monotonic() + 30
        while postmasters(tmp_path / "pg") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not postmasters(tmp_path / "pg"), f"{run}: the server outlived the process that started it"
        assert not (tmp_path / "pg" / "postmaster.pid").exists(), run
