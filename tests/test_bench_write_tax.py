"""bench/bench_write_tax.py, what being watched costs the agents' server (issue 52), run at its smallest: three servers
of its own, the follower as its own process, one round of one workload, the idle window and its control. It must run
to the end, print the ratios and the control, and find every aggregate equal to a recount."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow  # three servers and a follower process of its own


def test_the_write_tax_bench_runs_and_every_aggregate_equals_a_recount():
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.bench_write_tax",
            "--ops",
            "10",
            "--rounds",
            "1",
            "--idle",
            "2",
            "--workload",
            "store put, no vector index",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    assert "every aggregate equals a recount: True" in out, out
    assert re.search(r"^\| store put, no vector index \| [\d.]+ \| (?:[\d.]+|nan)x .* \| [\d.]+x ", out, re.M), out
    control = re.search(r"control, idle 2 s: the stock server polled every 0.5 s \((\d+) polls\)", out)
    assert control and int(control[1]) >= 2, out  # 2 s at 0.5 s: at least two polls
    assert re.search(r"the same query back to back: [\d.]+ ms a poll", out), out
