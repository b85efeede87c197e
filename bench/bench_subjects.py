"""The subject resolver's per-customer lookups with and without the indexes that serve them, in one run (since
migration 144 those of the change follower's core_checkpoint_shadow; before, migration 041's on `checkpoints`).

    python -m bench.bench_subjects --data /work/bench10m --dbname bench_prod_10000000_2500000_1000000_10000000_2500

On a database built by bench/bench_production.py (migrated, its follower caught up). The baseline runs the same
statements on the same connection inside a transaction that drops those indexes and is rolled back, so the
database is left as it was (the DROP holds an exclusive lock on core_checkpoint_shadow meanwhile: run it on a
benchmark copy). Prints, per customer id, the median ms of `subjects.resolve_conn`
(every source: metadata keys, thread-id pattern, store back-links, conversations, register) with and without.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from core.db import embedded_dsn
from core.privacy import subjects

INDEXES = ("core_checkpoint_shadow_subjects_idx", "core_checkpoint_shadow_thread_pattern_idx")
CUSTOMERS = ("C4", "C9", "C123456", "C9999999")  # small, large (bench_erasure), mid, unknown


def median_ms(conn: psycopg.Connection, customer: str, runs: int) -> float:
    config = subjects.Attribution()
    subjects.resolve_conn(conn, customer, config)  # warm
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subjects.resolve_conn(conn, customer, config)
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="the embedded server's folder")
    parser.add_argument("--dbname", required=True)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    dsn = psycopg.conninfo.make_conninfo(embedded_dsn(args.data), dbname=args.dbname)
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        missing = set(INDEXES) - {
            r["indexname"]
            for r in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'core_checkpoint_shadow'"
            ).fetchall()
        }
        if missing:
            raise SystemExit(f"{args.dbname} lacks {sorted(missing)}: migrate it first (core.migrate)")
        rows = conn.execute(
            "SELECT (SELECT count(*) FROM checkpoints) AS checkpoints, "
            "(SELECT count(DISTINCT thread_id) FROM checkpoints) AS threads"
        ).fetchone()
        with_ms = {c: median_ms(conn, c, args.runs) for c in CUSTOMERS}
        without_ms = {}
        with conn.transaction(force_rollback=True):
            for name in INDEXES:
                conn.execute(f'DROP INDEX "{name}"')
            without_ms = {c: median_ms(conn, c, args.runs) for c in CUSTOMERS}
    print(f"{args.dbname}: {rows['checkpoints']:,} checkpoints, {rows['threads']:,} threads; median of {args.runs}\n")
    print("| customer | resolve without the indexes (ms) | with (ms) | ratio |")
    print("|---|---:|---:|---:|")
    for c in CUSTOMERS:
        print(f"| {c} | {without_ms[c]:,.1f} | {with_ms[c]:,.1f} | {without_ms[c] / with_ms[c]:,.0f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
