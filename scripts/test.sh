#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what the tests need, then runs pytest
# against a real embedded PostgreSQL and a real Debian chromium. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's packages and pip's install side by side (on a fresh machine each takes a minute or more, mostly waiting on
# downloads); each fails the script if it fails.
apt_pid=""
if ! command -v chromium >/dev/null 2>&1 || ! command -v faketime >/dev/null 2>&1 \
   || ! command -v promtool >/dev/null 2>&1 || ! command -v haproxy >/dev/null 2>&1 \
   || ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1 \
   || ! command -v debootstrap >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  # prometheus: promtool; haproxy: the sticky proxy in front of two dashboards (tests/test_browser_sticky_proxy.py);
  # podman, runc, debootstrap: the real container image built and run (tests/test_image.py, scripts/build_image_offline.sh)
  ( $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium faketime \
      prometheus haproxy podman runc debootstrap >/dev/null ) &
  apt_pid=$!
fi
python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
if [ -n "$apt_pid" ]; then wait "$apt_pid"; fi

# Three pytest-xdist workers by default (PYTEST_WORKERS=N to change; 0: one process), each with its own embedded
# PostgreSQL: most of the slow tier waits (on a dashboard, a browser, a timeout, an outage), so two workers left a
# third of the 2 cores idle (24 min, 132 % of CPU). Three made timing-bound tests fail until those waited on events
# rather than fixed times (2026-12-07); from a fresh clone of 3617289: 1,241 passed, 19 min 3 s, 144 %. Units of work
# and their order: tests/_scheduling.py (a module is a unit when its tests share a module fixture, else each test is
# one; longest first; Playwright per browser module).
# --durations=30 and --unit-times=50: the slowest tests and the modules' wall and CPU at the end of every run, so CI
# logs show where the time goes. pytest exits 5 when no test ran: that is a failure here, like any other non-zero code.
# scripts/reap.py: pytest runs as the reaper of what its workers leave behind (embedded PostgreSQL servers, chromium's
# helpers), so `/usr/bin/time` and CI count their CPU too (without it, ~450 of the run's ~2,065 CPU seconds went uncounted).
exec python scripts/reap.py python -m pytest -n "${PYTEST_WORKERS:-3}" --dist loadgroup --no-loadscope-reorder --durations=30 --unit-times=50 "$@"
