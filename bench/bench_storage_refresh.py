"""Benchmark of the sweep job's storage refresh (core/checkpoints/storage.py) on bench_production's database: the
refresh as the sweep runs it (core_thread_storage plus issue 27's detail: bytes per channel and step, orphans), with
and without KNOWN_THREADS_QUERY (threads the application no longer knows), against the refresh of core_thread_storage
alone (what it was before that detail), in the same run.

    python bench/bench_storage_refresh.py --data /work/bench-data    # bench_production's largest template

A fresh copy of the template (`CREATE DATABASE ... TEMPLATE`, migrated; the template itself is never changed) is
measured, then dropped. Each figure is one refresh in a transaction that is rolled back, so each reads the same data.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

import psycopg
from psycopg import sql as pgsql
from psycopg.rows import dict_row

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_production import DIMS  # noqa: E402
from bench.bench_sessions import production_dsn  # noqa: E402
from core.checkpoints import storage, storage_detail  # noqa: E402
from core.config import DEFAULT_SUBJECT_METADATA_KEYS  # noqa: E402
from core.migrate import migrate  # noqa: E402

KNOWN = "SELECT thread_id FROM core_conversations"  # the conversation log: one row per thread the agents started


def alone(conn: psycopg.Connection, keys: tuple[str, ...], batch_rows: int) -> dict:
    """core_thread_storage's batches only (no detail, no known threads): the refresh before issue 27."""
    for statement in storage.REFRESH_THREAD_STORAGE:
        conn.execute(statement)
    flags, array = storage._key_flags(keys)
    threads = batches = 0
    for lo, hi in storage.thread_ranges(conn, storage.SELECT_BATCH_END, batch_rows - 1):
        row = conn.execute(pgsql.SQL(storage.INSERT_STORAGE_BATCH).format(
            flags=flags, keys=array, range=storage.key_ranges(lo, hi), known=storage_detail.NOT_CHECKED)).fetchone()
        threads += int(row["threads"])
        batches += 1
    return {"threads": threads, "batches": batches}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="bench_production's --data folder")
    parser.add_argument("--known-query", default=KNOWN)
    parser.add_argument("--batch-rows", type=int, default=storage.STORAGE_BATCH_ROWS)
    args = parser.parse_args(argv)
    template_dsn, _ = production_dsn(args.data)
    template = psycopg.conninfo.conninfo_to_dict(template_dsn)["dbname"]
    base = psycopg.conninfo.make_conninfo(template_dsn, dbname="postgres")
    name = f"refresh_{uuid.uuid4().hex[:8]}"
    keys = DEFAULT_SUBJECT_METADATA_KEYS
    print(f"template {template}; load average {os.getloadavg()}", flush=True)
    with psycopg.connect(base, autocommit=True) as admin:
        t = time.perf_counter()
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY')
        print(f"copy {name} in {time.perf_counter() - t:.0f} s", flush=True)
    try:
        dsn = psycopg.conninfo.make_conninfo(template_dsn, dbname=name)
        migrate(dsn, DIMS)
        rows = []
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
            conn.execute("ANALYZE")
            counts = conn.execute("SELECT (SELECT count(*) FROM checkpoints) AS checkpoints, (SELECT count(*) FROM "
                                  "checkpoint_blobs) AS blobs, (SELECT count(*) FROM checkpoint_writes) AS writes, "
                                  "(SELECT count(*) FROM core_conversations) AS conversations").fetchone()
            print(f"rows: {counts}", flush=True)
            runs = (("core_thread_storage alone (before issue 27's detail)", lambda: alone(conn, keys, args.batch_rows)),
                    ("refresh as the sweep runs it, no KNOWN_THREADS_QUERY",
                     lambda: storage.refresh_storage_conn(conn, keys, args.batch_rows, known_query=None)),
                    (f"refresh as the sweep runs it, KNOWN_THREADS_QUERY = `{args.known_query}`",
                     lambda: storage.refresh_storage_conn(conn, keys, args.batch_rows, known_query=args.known_query)))
            for label, run in runs:
                load = os.getloadavg()[0]
                t = time.perf_counter()
                with conn.transaction(force_rollback=True):
                    done = run()
                    orphans = conn.execute(storage_detail.SELECT_ORPHAN_TOTALS).fetchone()
                    unknown = conn.execute(storage_detail.SELECT_UNKNOWN_TOTALS).fetchone()
                seconds = time.perf_counter() - t
                rows.append((label, seconds, load, done, orphans, unknown))
                print(f"{label}: {seconds:.1f} s (load {load:.1f})", flush=True)
    finally:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    baseline = rows[0][1]
    print(f"\n## storage refresh, {counts['writes']:,} checkpoint writes, {counts['checkpoints']:,} checkpoints, "
          f"{counts['blobs']:,} blobs (batches of {args.batch_rows:,} rows per table)")
    print("| run | seconds | x baseline | load (1 min) | result |\n|---|---:|---:|---:|---|")
    for label, seconds, load, done, orphans, unknown in rows:
        if isinstance(done, dict):
            result = f"{done['threads']:,} threads, {done['batches']} batches"
        else:
            result = (f"{done.threads:,} threads, {done.batches} batches; orphans {orphans['blobs']:,} blobs, "
                      f"{orphans['writes']:,} writes; unknown threads "
                      + ("not checked" if unknown["threads"] is None and unknown["error"] is None else
                         f"error: {unknown['error']}" if unknown["error"] else
                         f"{unknown['threads']:,} ({unknown['bytes'] / 1e6:.1f} MB)"))
        print(f"| {label} | {seconds:.1f} | {seconds / baseline:.2f} | {load:.1f} | {result} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
