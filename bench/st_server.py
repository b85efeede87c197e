"""Starting a dashboard (`streamlit run`) and walking its pages in a browser: the one helper the benchmarks and the
tests share (tests/conftest.py's `start_streamlit` is built on it).

A server's output goes to a temporary file (`proc.log`), never to a pipe nobody reads: a server logging a lot would
block on a full pipe, stop answering and not exit on SIGTERM."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Debian's chromium as Playwright launches it here (../shared/TESTING.md)
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(
    env: Mapping[str, str] | None = None,
    *,
    port: int | None = None,
    args: Iterable[str] = (),
    script: str = "dashboard.py",
    drop: Iterable[str] = (),
    cwd: Path = ROOT,
) -> tuple[subprocess.Popen, str]:
    """`streamlit run script` on a loopback port (a free one unless `port`), not waited for; returns the process
    and its URL. Its environment is this process's without the variables in `drop`, plus `env`; `args` go to
    `streamlit run` (e.g. --secrets.files); `cwd`: the checkout it runs (another one for a baseline)."""
    port = port or free_port()
    environment = {k: v for k, v in os.environ.items() if k not in set(drop)} | dict(env or {})
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            script,
            "--server.headless",
            "true",
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--server.fileWatcherType",
            "none",
            "--browser.gatherUsageStats",
            "false",
            *args,
        ],
        cwd=cwd,
        env=environment,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    proc.log = log  # type: ignore[attr-defined]  # read when the server does not start or exit
    return proc, f"http://127.0.0.1:{port}"


def log_tail(proc: subprocess.Popen, chars: int = 2000) -> str:
    log: Any = getattr(proc, "log", None)
    if log is None:
        return ""
    log.seek(0)
    return log.read().decode(errors="replace")[-chars:]


def wait_health(url: str, proc: subprocess.Popen | None = None, timeout: float = 60) -> None:
    """Until the server's health endpoint answers `ok`; RuntimeError, with the server's log, if it exits first or
    does not answer within `timeout` seconds (the server is then killed)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).read() == b"ok":
                return
        except OSError:
            exited = proc is not None and proc.poll() is not None
            if exited or time.monotonic() > deadline:
                if proc is not None and not exited:
                    proc.kill()
                    proc.wait(10)
                raise RuntimeError(f"streamlit did not start: {log_tail(proc) if proc is not None else url}") from None
            time.sleep(0.05)


def start_dashboard(
    env: Mapping[str, str] | None = None,
    *,
    port: int | None = None,
    args: Iterable[str] = (),
    script: str = "dashboard.py",
    drop: Iterable[str] = (),
    timeout: float = 60,
) -> tuple[subprocess.Popen, str]:
    """`launch`, then `wait_health`: a dashboard that answers."""
    proc, url = launch(env, port=port, args=args, script=script, drop=drop)
    wait_health(url, proc, timeout)
    return proc, url


def stop_dashboard(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM, then wait for the exit (killed after `timeout` seconds)."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


# The app's script run is over (streamlit 1.67: its state is an attribute of stApp, the stStatusWidget test id is gone;
# "rerunRequested" is set by the browser as soon as a widget changes).
SCRIPT_IDLE = (
    "() => !['running', 'rerunRequested']"
    ".includes(document.querySelector('[data-testid=stApp]')?.dataset.testScriptState)"
)


def wait_idle(page: Any, timeout_ms: float = 60_000) -> None:
    """Until the page's script run is over (SCRIPT_IDLE): a click then lands on what the run drew last."""
    page.wait_for_function(SCRIPT_IDLE, timeout=timeout_ms, polling=50)


# Everything the last run sent is drawn: the run is over (SCRIPT_IDLE), no element still shows its loading skeleton
# (streamlit loads the dataframe and plotly components' code on first use and draws a skeleton until then), every
# plotly chart has drawn its SVG and every dataframe its grid (glide's table of the cells in view, beside its canvas),
# but those hidden (a collapsed expander's, another tab's), drawn only when shown; and no font is still loading (a
# text's width, and what a screenshot shows, depend on it).
UNPAINTED = """() => {
    const state = document.querySelector('[data-testid=stApp]')?.dataset.testScriptState;
    const missing = (selector, part) => [...document.querySelectorAll(selector)].filter(
        (e) => e.checkVisibility() && !e.querySelector(part)  // a collapsed expander's or other tab's: not drawn
    );
    return {
        run: ['running', 'rerunRequested'].includes(state) ? state : null,
        skeletons: document.querySelectorAll('[data-testid=stSkeleton]').length,
        charts: missing('[data-testid=stPlotlyChart]', '.main-svg').length,
        grids: missing('[data-testid=stDataFrame]', 'table').length,
        fonts: document.fonts.status === 'loaded' ? null : document.fonts.status,
    };
}"""
PAINTED = f"() => {{ const u = ({UNPAINTED})(); return !u.run && !u.skeletons && !u.charts && !u.grids && !u.fonts; }}"


def wait_painted(page: Any, timeout_ms: float = 60_000) -> None:
    """Until what the page's last run sent is drawn (PAINTED): charts and grids included, which streamlit draws
    after the run is over (measured: a page's three charts 3 s after it). A check that something is absent, or a
    screenshot, then sees the whole page; instead of a fixed wait, too short under load and too long idle."""
    try:
        page.wait_for_function(PAINTED, timeout=timeout_ms, polling=50)
    except Exception as exc:  # Playwright's TimeoutError: say what was not drawn, on which page
        raise AssertionError(f"{page.url} not drawn in {timeout_ms / 1000:g} s: {page.evaluate(UNPAINTED)}") from exc


def page_url(url: str, path: str, lang: str | None = None) -> str:
    """The URL of a page (`path` may hold its query), in `lang` when given."""
    target = f"{url}/{path}"
    return target + (("&" if "?" in target else "?") + f"lang={lang}" if lang else "")


def walk_pages(
    page: Any, url: str, paths: Mapping[str, str], lang: str | None = None, timeout_ms: float = 30_000
) -> Iterator[str]:
    """Open each page of `paths` (name -> path and query) in the Playwright `page`, in `lang` when given, and yield
    its name once its first heading shows; the caller checks the page before the walk goes on."""
    for name, path in paths.items():
        page.goto(page_url(url, path, lang))
        page.get_by_test_id("stHeading").first.wait_for(timeout=timeout_ms)
        yield name
