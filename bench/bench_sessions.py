"""Many people at once on ONE dashboard process: N concurrent sessions over Streamlit's own websocket protocol
(bench/st_client.py: what the browser sends and receives, without a browser's rendering), each switching pages as a
person does, some sitting on the Degradation page, whose fragment refreshes itself every few seconds.

    python -m bench.bench_sessions --production .data/bench_production   # bench_production's 1M database
    python -m bench.bench_sessions --dsn postgresql://... --sessions 10 25 50 --duration 90
    python -m bench.bench_sessions --production .data/bench_production --fresh --sessions 10 25 50 100

--fresh measures what a new install meets: the template is built again right before the first level (as
`python -m bench.bench_production --build-only --rebuild`) and read at once, never swept (no stored coverage, no
storage summary), PostgreSQL still busy with its own maintenance of the new database. Failed page loads are a
figure of their own (the exit code is 1 when any level had one).

For each level of --sessions: a fresh `streamlit run dashboard.py` (local mode, all roles; its caches empty), the
sessions opened over --ramp seconds, then for --duration seconds each "browsing" session opens a page at random and
waits a think time (uniform --think seconds) before the next; every --refresh-every-th session opens the Degradation
page and stays there, its fragment rerun at the interval the server asks for (st.fragment run_every). Measured:
page time (from the browser's request to the server's `script_finished`) p50/p95/max overall and per page, the
Degradation fragment's reruns, the dashboard process's memory (RSS peak and at the end) and where the CPU time went
(the dashboard process vs the PostgreSQL server's processes, over the level). Prints a markdown table; results in
BENCHMARKS.md, "Many sessions on one process", and the sizing advice in README's "Deployment".

Only reads: the sessions never erase or sweep (a --production run reads the template in place, unchanged).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import psycopg

from bench import st_server
from bench.st_client import StreamlitSession
from core.config import term_hash_key

ROOT = Path(__file__).resolve().parent.parent
# the pages a person opens, by URL path; the Degradation page is the refreshing sessions' own
PAGES = [
    "memory",
    "preferences",
    "sweeps",
    "checkpoints",
    "degradation",
    "erasure",
    "erasure-register",
    "access",
    "access-register",
]
DEGRADATION = "degradation"
LATE_S = 120  # how long past --duration a session waits for its fragment's reruns (run_level's min_reruns)


@dataclass
class Level:
    sessions: int
    page_s: dict[str, list[float]] = field(default_factory=dict)
    fragment_s: dict[str, list[float]] = field(default_factory=dict)  # by run_every interval
    failures: list[str] = field(default_factory=list)
    rss_peak_mb: float = 0.0
    rss_end_mb: float = 0.0
    rss_idle_mb: float = 0.0
    dashboard_cpu_s: float = 0.0
    postgres_cpu_s: float = 0.0
    wall_s: float = 0.0

    def all_pages(self) -> list[float]:
        return [s for times in self.page_s.values() for s in times]


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def start_dashboard(dsn: str, dims: int, extra_env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    env = {
        "PG_AGENTES": dsn,
        "EMBEDDINGS_DIMS": str(dims),
        # the key the template's hashes were made with (bench_production runs embedded: the data folder's key)
        "TERM_HASH_KEY": os.environ.get("TERM_HASH_KEY") or term_hash_key().hex(),
        "AUTO_MIGRATE": "0",
        "SEED_DEMO": "0",
        "DEMO_REPLICAS": "0",
        **extra_env,
    }
    return st_server.start_dashboard(env)


def postgres_cpu_s(dsn: str) -> float:
    """CPU seconds of the PostgreSQL server's processes (postmaster and its children) so far."""
    with psycopg.connect(dsn) as conn:
        data_dir = conn.execute("SELECT current_setting('data_directory')").fetchone()[0]
    pid = int((Path(data_dir) / "postmaster.pid").read_text().split()[0])
    total = 0.0
    server = psutil.Process(pid)
    for proc in [server, *server.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
        except psutil.NoSuchProcess:
            pass
    return total


async def person(
    url: str,
    level: Level,
    stop_at: float,
    rng: random.Random,
    think: tuple[float, float],
    refreshing: bool,
    min_reruns: int = 0,
) -> None:
    """One person: a page, a think time, another page... (`refreshing`: the Degradation page, and stays, past
    `stop_at` until its most frequent fragment reran `min_reruns` times, at most LATE_S more). Between pages, as
    the browser does, each fragment of the open page with a run_every (the sidebar's status, the Degradation
    page's live part) is rerun at its interval."""
    ok = ("FINISHED_SUCCESSFULLY", "FINISHED_FRAGMENT_RUN_SUCCESSFULLY")

    def failed(what: str, run) -> bool:
        if run.status not in ok or run.exceptions or run.errors:
            level.failures.append(f"{what}: {run.status} {(run.exceptions + run.errors)[:1]}")
            return True
        return False

    try:
        async with StreamlitSession(url, timeout=120) as session:
            first, next_page = True, time.monotonic()
            itinerary = rng.sample(PAGES, len(PAGES))  # every page in a random order, then again
            visits = 0
            fragments: dict[str, float] = {}  # fragment id -> interval s, of the open page
            due: dict[str, float] = {}
            reruns: dict[str, int] = {}  # fragment id -> reruns

            def enough() -> bool:
                fastest = min(fragments, key=fragments.__getitem__, default=None)
                return not refreshing or fastest is None or reruns.get(fastest, 0) >= min_reruns

            while True:
                fragment = min(due, key=due.get, default=None)
                at = min(next_page, due[fragment] if fragment else float("inf"))
                if at >= stop_at and (enough() or at >= stop_at + LATE_S):
                    return
                await asyncio.sleep(max(0.0, at - time.monotonic()))
                if at == next_page:
                    if first:
                        what = "(first page)"
                    elif refreshing:
                        what = DEGRADATION
                    else:
                        what, visits = itinerary[visits % len(PAGES)], visits + 1
                    run = await session.run(page=None if first else what)
                    first = False
                    if failed(what, run):
                        return
                    level.page_s.setdefault(what, []).append(run.seconds)
                    fragments = dict(run.auto_reruns)
                    due = {f: time.monotonic() + interval for f, interval in fragments.items()}
                    if refreshing and what == DEGRADATION:
                        next_page = float("inf")
                    else:
                        next_page = time.monotonic() + rng.uniform(*think)
                else:
                    run = await session.run(fragment_id=fragment)
                    if failed("fragment", run):
                        return
                    level.fragment_s.setdefault(f"every {fragments[fragment]:g} s", []).append(run.seconds)
                    reruns[fragment] = reruns.get(fragment, 0) + 1
                    due[fragment] = time.monotonic() + fragments[fragment]
    except Exception as exc:  # a dropped websocket, a timeout: counted, the level goes on
        level.failures.append(f"{type(exc).__name__}: {exc}")


async def drive(
    url: str,
    level: Level,
    duration: float,
    ramp: float,
    think: tuple[float, float],
    refresh_every: int,
    seed: int,
    min_reruns: int = 0,
) -> None:
    stop_at = time.monotonic() + ramp + duration
    tasks = []
    for i in range(level.sessions):
        rng = random.Random(seed * 1000 + i)
        refreshing = refresh_every > 0 and i % refresh_every == refresh_every - 1
        tasks.append(asyncio.create_task(person(url, level, stop_at, rng, think, refreshing, min_reruns)))
        await asyncio.sleep(ramp / level.sessions)
    await asyncio.gather(*tasks)


def run_level(
    dsn: str,
    dims: int,
    sessions: int,
    *,
    duration: float,
    ramp: float,
    think: tuple[float, float],
    refresh_every: int,
    seed: int,
    extra_env: dict[str, str],
    profile: Path | None = None,
    min_reruns: int = 0,
) -> Level:
    """One level; with `profile`, py-spy samples the dashboard over the steady part into that file (collapsed
    stacks), summarised by `where_the_time_goes`. `min_reruns`: the sessions on the Degradation page stay past
    `duration` until their fragments reran that many times (a loaded machine slows the pages, not the count)."""
    level = Level(sessions)
    proc, url = start_dashboard(dsn, dims, extra_env)
    spy = None
    try:
        if profile:
            spy = subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "--pid",
                    str(proc.pid),
                    "--rate",
                    "20",
                    "--duration",
                    str(int(duration)),
                    "--format",
                    "raw",
                    "--nonblocking",
                    "--output",
                    str(profile),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        dashboard = psutil.Process(proc.pid)
        level.rss_idle_mb = dashboard.memory_info().rss / 1e6
        cpu0, pg0, t0 = sum(dashboard.cpu_times()[:2]), postgres_cpu_s(dsn), time.monotonic()

        async def sample_memory() -> None:
            while True:
                level.rss_peak_mb = max(level.rss_peak_mb, dashboard.memory_info().rss / 1e6)
                await asyncio.sleep(0.5)

        async def main() -> None:
            sampler = asyncio.create_task(sample_memory())
            await drive(url, level, duration, ramp, think, refresh_every, seed, min_reruns)
            sampler.cancel()

        asyncio.run(main())
        level.wall_s = time.monotonic() - t0
        level.dashboard_cpu_s = sum(dashboard.cpu_times()[:2]) - cpu0
        level.postgres_cpu_s = postgres_cpu_s(dsn) - pg0
        level.rss_end_mb = dashboard.memory_info().rss / 1e6
        if spy:
            spy.wait(60)
    finally:
        st_server.stop_dashboard(proc)  # a loaded machine: killed after 30 s, the level's figures stand
    return level


def report(levels: list[Level], header: str) -> str:
    lines = [
        header,
        "",
        "| sessions | page loads | p50 s | p95 s | max s | fragment reruns (p50 / p95 s) | failures "
        "| RSS idle / peak / end MB | CPU s: dashboard / PostgreSQL (wall s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for lv in levels:
        pages = lv.all_pages()
        fragments = "; ".join(
            f"{k}: {len(v)} ({pct(v, 50):.2f} / {pct(v, 95):.2f})" for k, v in sorted(lv.fragment_s.items())
        )
        lines.append(
            f"| {lv.sessions} | {len(pages)} | {pct(pages, 50):.2f} | {pct(pages, 95):.2f} | "
            f"{max(pages, default=float('nan')):.2f} | {fragments or '-'} | "
            f"{len(lv.failures)} | {lv.rss_idle_mb:.0f} / {lv.rss_peak_mb:.0f} / {lv.rss_end_mb:.0f} | "
            f"{lv.dashboard_cpu_s:.0f} / {lv.postgres_cpu_s:.0f} ({lv.wall_s:.0f}) |"
        )
    pages = sorted({p for lv in levels for p in lv.page_s})
    lines += [
        "",
        "Per page, p50 / p95 s (loads) at each level:",
        "",
        "| page | " + " | ".join(f"{lv.sessions} sessions" for lv in levels) + " |",
        "|---|" + "---|" * len(levels),
    ]
    for page in pages:
        cells = []
        for lv in levels:
            times = lv.page_s.get(page, [])
            cells.append(f"{pct(times, 50):.2f} / {pct(times, 95):.2f} ({len(times)})" if times else "-")
        lines.append(f"| {page} | " + " | ".join(cells) + " |")
    for lv in levels:
        for failure in sorted(set(lv.failures))[:5]:
            lines.append(f"\nfailure at {lv.sessions} sessions: {failure}")
    return "\n".join(lines)


# py-spy names our files relative to the app's folder (a page by its bare file name), a library's from site-packages
OURS = ("(dashboard.py", "(ui/", "(core/", "(app_pages/", *(f"({p.name}:" for p in (ROOT / "app_pages").glob("*.py")))


def where_the_time_goes(profile: Path, top: int = 20) -> str:
    """Where the script runs spend their time (py-spy's samples of every thread, idle waits excluded): each
    sample charged to the deepest frame of our code on its stack and the library call it was in."""
    counts: dict[str, int] = {}
    total = 0
    for line in profile.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        ours = [i for i, f in enumerate(frames) if any(m in f for m in OURS)]
        if not n.isdigit() or not ours:
            continue  # threads outside a script run: the event loop, pools' idle workers
        total += int(n)
        callee = frames[ours[-1] + 1].split(" (")[0] if ours[-1] + 1 < len(frames) else "(itself)"
        key = f"{frames[ours[-1]]} -> {callee}"
        counts[key] = counts.get(key, 0) + int(n)
    rows = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
    return "\n".join(
        [f"{total} samples in script runs, by our deepest frame -> the call it was in:"]
        + [f"{100 * n / total:5.1f}%  {frame}" for frame, n in rows]
    )


def production_dsn(data: Path) -> tuple[str, int]:
    from bench.bench_production import DIMS
    from core.db import embedded_dsn

    base = embedded_dsn(data)
    with psycopg.connect(base) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE 'bench\\_prod\\_%' AND datname NOT LIKE "
                "'%\\_building' "
                "AND datname NOT LIKE '%\\_run' ORDER BY pg_database_size(datname) DESC"
            )
        ]
    if not names:
        raise SystemExit(f"no bench_production template in {data}: python -m bench.bench_production --build-only")
    return psycopg.conninfo.make_conninfo(base, dbname=names[0]), DIMS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_sessions", description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--dsn", help="a database with the dashboard's migrations (read only)")
    where.add_argument("--production", type=Path, help="bench_production's --data folder: its largest template")
    parser.add_argument(
        "--fresh", action="store_true", help="with --production: build the template again first and read it at once"
    )
    parser.add_argument("--dims", type=int, default=64, help="EMBEDDINGS_DIMS of --dsn")
    parser.add_argument("--sessions", type=int, nargs="+", default=[10, 25, 50])
    parser.add_argument("--duration", type=float, default=90, help="seconds of steady load per level")
    parser.add_argument("--ramp", type=float, default=10, help="seconds over which the sessions open")
    parser.add_argument("--think", type=float, nargs=2, default=(3.0, 12.0), help="think time range, seconds")
    parser.add_argument(
        "--refresh-every", type=int, default=5, help="every Nth session sits on the Degradation page (0: none)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the dashboard (repeatable)")
    parser.add_argument("--profile", type=Path, help="folder: py-spy samples the dashboard at each level")
    args = parser.parse_args(argv)
    if args.fresh:
        if not args.production:
            parser.error("--fresh needs --production (the folder bench_production builds into)")
        from bench import bench_production

        started = time.monotonic()
        bench_production.main(["--build-only", "--rebuild", "--data", str(args.production)])
        print(f"template built again in {time.monotonic() - started:.0f} s; measuring at once", flush=True)
    dsn, dims = production_dsn(args.production) if args.production else (args.dsn, args.dims)
    extra_env = dict(item.split("=", 1) for item in args.env)
    with psycopg.connect(dsn) as conn:
        docs = conn.execute("SELECT count(*) FROM store").fetchone()[0]
        writes = conn.execute("SELECT count(*) FROM checkpoint_writes").fetchone()[0]
    levels = []
    for n in args.sessions:
        profile = args.profile / f"sessions-{n}.txt" if args.profile else None
        if profile:
            args.profile.mkdir(parents=True, exist_ok=True)
        level = run_level(
            dsn,
            dims,
            n,
            duration=args.duration,
            ramp=args.ramp,
            think=tuple(args.think),
            refresh_every=args.refresh_every,
            seed=args.seed,
            extra_env=extra_env,
            profile=profile,
        )
        levels.append(level)
        if profile and profile.exists():
            print(where_the_time_goes(profile), flush=True)
        print(
            f"{n} sessions: {len(level.all_pages())} page loads, p95 {pct(level.all_pages(), 95):.2f} s, "
            f"{len(level.failures)} failures; load {os.getloadavg()}",
            flush=True,
        )
    header = (
        f"`python -m bench.bench_sessions {' '.join(argv if argv is not None else sys.argv[1:])}`: "
        f"{docs:,} documents, {writes:,} checkpoint writes; {os.cpu_count()} cores, load at the end "
        f"{tuple(round(x, 1) for x in os.getloadavg())}; think {args.think[0]:g}-{args.think[1]:g} s, "
        f"every {args.refresh_every}th session on the Degradation page; --duration {args.duration:g} s"
    )
    print(report(levels, header))
    return 1 if any(lv.failures for lv in levels) else 0


if __name__ == "__main__":
    sys.exit(main())
