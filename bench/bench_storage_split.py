"""The sweep's storage refresh and attribution coverage (core/storage/storage.py, core/privacy/subjects.py) with the
dashboard's tables in the agents' database (the default layout) and in a database of their own (issue 52,
PG_DASHBOARD: the refresh reads the agents' side in one READ ONLY snapshot and writes its rows in ours, shipped as
JSON), on the same rows in one run.

    python -m bench.bench_storage_split --writes 100000 --rounds 3

A database on an embedded PostgreSQL (folder --data, default .data/bench_storage_split): real checkpoints of the
retail agents (scripted model, real tools, `PostgresSaver` with the real serializer) COPYed by bench/bench_decoder.py's
`replicate` to --writes rows in `checkpoint_writes`. Per round and layout, alternating (the load moves in between):
the full refresh (every thread's detail), the incremental refresh right after it (nothing changed: summary rows
only), and the coverage computed from the refreshed summary. Prints seconds per layout and the ratio apart / default
per step (median over the rounds).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_decoder import replicate, write_templates  # noqa: E402
from bench.bench_production import DIMS  # noqa: E402
from core.capture.follower import catch_up, drop_slot  # noqa: E402
from core.db import Database, embedded_dsn, forget_dashboard_database, use_dashboard_database  # noqa: E402
from core.migrate import migrate, migrate_dashboard  # noqa: E402
from core.privacy import subjects  # noqa: E402
from core.storage import storage  # noqa: E402

STEPS = ("full refresh (every thread's detail)", "incremental refresh (nothing changed)", "coverage from the summary")


def database(base: str, writes: int) -> tuple[str, bool]:
    name = f"bench_storage_split_{writes}"
    with psycopg.connect(base, autocommit=True) as conn:
        fresh = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None
        if fresh:
            conn.execute(f'CREATE DATABASE "{name}"')
    return psycopg.conninfo.make_conninfo(base, dbname=name), fresh


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def steps(db: Database) -> list[float]:
    config = subjects.Attribution.from_settings()
    return [
        timed(lambda: storage.refresh_thread_storage(db, known_query=None, full=True)),
        timed(lambda: storage.refresh_thread_storage(db, known_query=None)),
        timed(lambda: subjects.refresh_coverage(db, config, storage_refreshed=True)),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writes", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data", type=Path, default=Path(".data/bench_storage_split"))
    args = parser.parse_args(argv)
    dsn, fresh = database(embedded_dsn(args.data), args.writes)
    forget_dashboard_database(dsn)
    migrate(dsn, DIMS)
    db = Database(dsn)
    if fresh:
        print(f"writing templates with the real agents, then COPY to {args.writes:,} writes ...", flush=True)
        write_templates(db)
        print(replicate(dsn, args.writes), flush=True)
    n = db.fetch_one(
        "SELECT (SELECT count(*) FROM checkpoints) AS c, (SELECT count(*) FROM checkpoint_blobs) AS b,"
        " (SELECT count(*) FROM checkpoint_writes) AS w, (SELECT count(DISTINCT thread_id) FROM checkpoints) AS t"
    )
    print(f"rows: threads {n['t']:,}, checkpoints {n['c']:,}, blobs {n['b']:,}, writes {n['w']:,}", flush=True)
    ours = psycopg.conninfo.make_conninfo(dsn, dbname=f"{psycopg.conninfo.conninfo_to_dict(dsn)['dbname']}_dashboard")
    migrate_dashboard(ours)
    found: dict[str, list[list[float]]] = {"default": [], "apart": []}
    try:
        for r in range(args.rounds):
            for layout in ("default", "apart"):
                if layout == "apart":
                    use_dashboard_database(dsn, ours)
                else:
                    forget_dashboard_database(dsn)
                catch_up(dsn)  # the follower's shadow and mirrors where the coverage reads them
                found[layout].append(steps(db))
                drop_slot(dsn)  # the other layout's follower recounts from scratch
                db.ours.close()
            print(
                f"round {r + 1}: "
                + "; ".join(f"{k} " + ", ".join(f"{s:.2f}" for s in v[-1]) + " s" for k, v in found.items()),
                flush=True,
            )
    finally:
        forget_dashboard_database(dsn)
        db.close()
    print("\n| step | default (s, median) | apart (s, median) | apart / default (median of rounds) |")
    print("|---|---:|---:|---:|")
    for i, name in enumerate(STEPS):
        one_db = statistics.median(r[i] for r in found["default"])
        apart = statistics.median(r[i] for r in found["apart"])
        ratio = statistics.median(a[i] / d[i] for a, d in zip(found["apart"], found["default"], strict=True))
        print(f"| {name} | {one_db:.2f} | {apart:.2f} | {ratio:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
