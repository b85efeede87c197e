"""The date-dependent tests pass whatever the hour: the demo seed and the pages run under a faked
clock (libfaketime, Debian's `faketime`) just after midnight and just before midnight UTC.

Until the demo placed its replayed conversations on whole past days, a seed run between 00:00 and
10:00 UTC dated some of them before the Preferences page's 30-day window and
`test_preferences_page_figures_equal_sql` failed (it did at 00:30 under this test)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow  # runs other tests again under a faked clock

# The tests whose figures depend on today's date: the demo seed's replayed days and the pages'
# "last 30 days" windows (plus the Memory page, which reads the same seed), and times of day as Spanish writes them.
DATE_DEPENDENT = [
    "tests/test_pages_store.py::test_preferences_page_figures_equal_sql",
    "tests/test_pages_store.py::test_memory_page_figures_equal_sql",
    "tests/test_preferences_applied.py",
    # times of day in Spanish: no leading zero before 10:00 ("0:30:00"), which a test once assumed
    "tests/test_sre_screens.py::test_times_of_day_name_the_viewers_zone",
    "tests/test_checkpoints_page.py::test_one_step_writes_and_diff_toggle",
    "tests/test_erasure_pages.py::test_dpo_erases_a_customer_end_to_end",
]


def faketime_binary() -> str:
    path = shutil.which("faketime")
    assert path, "Debian's faketime is needed (scripts/test.sh installs it: apt-get install faketime)"
    return path


@pytest.mark.parametrize("at", ["2026-12-03 00:30:00", "2026-12-03 23:30:00"])
def test_date_dependent_tests_pass_at(at):
    # -m: the multi-threaded libfaketime (Python's threads, PostgreSQL's processes); the clock
    # starts at `at` and runs on, in the test process and in the embedded server it starts.
    faketime = faketime_binary()
    env = {**os.environ, "TZ": "UTC"}
    hour = subprocess.run(
        [
            faketime,
            "-m",
            at,
            sys.executable,
            "-c",
            "from datetime import datetime, timezone; print(datetime.now(timezone.utc).hour)",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.strip()
    assert int(hour) == int(at[11:13]), f"faketime did not fake the clock: hour {hour}"
    run = subprocess.run(
        [faketime, "-m", at, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *DATE_DEPENDENT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout
