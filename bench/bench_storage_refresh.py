"""Benchmark of the sweep job's storage refresh (core/storage/storage.py) on bench_production's database: the old
full refresh (every thread's detail recomputed at every run, the code as of BASELINE_REV) as the baseline, the
per-thread summary alone (what the refresh was before issue 27's detail), and the incremental refresh as the sweep
runs it now: its first run (every thread's detail computed) and a second run after a small batch of agent turns
(only the threads written are recomputed), in the same run on the same copy.

    python bench/bench_storage_refresh.py --data /work/bench-data    # bench_production's largest template

A fresh copy of the template (`CREATE DATABASE ... TEMPLATE`, migrated; the template itself is never changed) is
measured, then dropped. The summary alone (first: it also warms the cache) and the baseline each run in a
transaction that is rolled back; the
incremental runs commit, as the sweep does (the second reads the first's fingerprints). The load average is printed
with each figure: on a shared machine the ratios to the baseline are the comparable figures.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import types
import uuid
from pathlib import Path

import psycopg
from psycopg import sql as pgsql
from psycopg.rows import dict_row

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_production import DIMS  # noqa: E402
from bench.bench_sessions import production_dsn  # noqa: E402
from core.config import DEFAULT_SUBJECT_METADATA_KEYS  # noqa: E402
from core.migrate import migrate  # noqa: E402
from core.storage import storage, storage_detail  # noqa: E402

# The last commit whose refresh recomputed every thread's detail at every run (before migration 090).
BASELINE_REV = "32ce943"


def old_storage(rev: str = BASELINE_REV) -> types.ModuleType:
    """core/checkpoints/storage.py (core/storage/storage.py today) with its storage_detail as of `rev`, loaded from git
    (they run on today's schema: the old refresh leaves the new columns NULL and the new table alone)."""

    def load(name: str, path: str, **extra) -> types.ModuleType:
        text = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{rev}:{path}"], check=True, capture_output=True, text=True
        ).stdout
        module = types.ModuleType(name)
        module.__dict__.update(extra)
        sys.modules[name] = module  # dataclasses look their module up
        exec(compile(text, f"{rev}:{path}", "exec"), module.__dict__)
        return module

    detail = load("old_storage_detail", "core/checkpoints/storage_detail.py")
    import core.checkpoints as package  # the package the old storage imports storage_detail from (no module of it now)

    package.storage_detail = detail  # old storage's `from ... import storage_detail`
    try:
        return load("old_storage", "core/checkpoints/storage.py")
    finally:
        del package.storage_detail


def alone(old: types.ModuleType, conn: psycopg.Connection, keys: tuple[str, ...], batch_rows: int) -> dict:
    """core_thread_storage's batches only (no detail, no known threads): the refresh before issue 27."""
    for statement in old.REFRESH_THREAD_STORAGE:
        conn.execute(statement)
    flags, array = old._key_flags(keys)
    threads = batches = 0
    for lo, hi in old.thread_ranges(conn, old.SELECT_BATCH_END, batch_rows - 1):
        row = conn.execute(
            pgsql.SQL(old.INSERT_STORAGE_BATCH).format(
                flags=flags, keys=array, range=old.key_ranges(lo, hi), known=old.storage_detail.NOT_CHECKED
            )
        ).fetchone()
        threads += int(row["threads"])
        batches += 1
    return {"threads": threads, "batches": batches, "detailed": None}


def agent_turns(dsn: str, existing: int, new: int) -> list[str]:
    """A small batch of agent writes: one turn of our customer agent in `existing` threads already there and in
    `new` new ones. Returns the threads written."""
    from langgraph.checkpoint.postgres import PostgresSaver

    from core.agents.retail import ContextoCliente, build_agent, run_turn
    from core.agents.scripted_model import ScriptedChatModel
    from core.db import Database
    from core.memory.embeddings import OfflineHashEmbeddings
    from core.memory.store import build_store

    db = Database(dsn)
    try:
        picked = db.fetch(
            "SELECT thread_id, cliente_id FROM core_thread_storage WHERE cliente_id IS NOT NULL "
            "ORDER BY hashtext(thread_id) LIMIT %s",
            (existing,),
            read_only=False,
        )
        threads = [(r["thread_id"], r["cliente_id"]) for r in picked]
        threads += [(f"cliente-bench{k}-refresh", f"bench{k}") for k in range(new)]
        agent = build_agent(
            "atencion-cliente",
            ScriptedChatModel(),
            store=build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS),
            checkpointer=PostgresSaver(db.pool),
        )
        for thread, customer in threads:
            run_turn(agent, ContextoCliente(customer), thread, "Hola, ¿y mi pedido?")
        return [t for t, _ in threads]
    finally:
        db.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="bench_production's --data folder")
    parser.add_argument("--batch-rows", type=int, default=storage.STORAGE_BATCH_ROWS)
    parser.add_argument("--existing", type=int, default=100, help="existing threads written before the second run")
    parser.add_argument("--new", type=int, default=20, help="new threads written before the second run")
    args = parser.parse_args(argv)
    template_dsn, _ = production_dsn(args.data)
    template = psycopg.conninfo.conninfo_to_dict(template_dsn)["dbname"]
    base = psycopg.conninfo.make_conninfo(template_dsn, dbname="postgres")
    name = f"refresh_{uuid.uuid4().hex[:8]}"
    keys = DEFAULT_SUBJECT_METADATA_KEYS
    old = old_storage()
    print(f"template {template}; load average {os.getloadavg()}", flush=True)
    with psycopg.connect(base, autocommit=True) as admin:
        t = time.perf_counter()
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY')
        print(f"copy {name} in {time.perf_counter() - t:.0f} s", flush=True)
    rows = []
    try:
        dsn = psycopg.conninfo.make_conninfo(template_dsn, dbname=name)
        migrate(dsn, DIMS)
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
            conn.execute("ANALYZE")
            counts = conn.execute(
                "SELECT (SELECT count(*) FROM checkpoints) AS checkpoints, (SELECT count(*) FROM "
                "checkpoint_blobs) AS blobs, (SELECT count(*) FROM checkpoint_writes) AS writes"
            ).fetchone()
            print(f"rows: {counts}", flush=True)

            def measure(label: str, run, rollback: bool) -> None:
                load = os.getloadavg()[0]
                t = time.perf_counter()
                with conn.transaction(force_rollback=rollback):
                    done = run()
                    orphans = conn.execute(storage_detail.SELECT_ORPHAN_TOTALS).fetchone()
                seconds = time.perf_counter() - t
                rows.append((label, seconds, load, done, orphans))
                print(f"{label}: {seconds:.1f} s (load {load:.1f})", flush=True)

            measure(
                "core_thread_storage alone (before issue 27's detail)",
                lambda: alone(old, conn, keys, args.batch_rows),
                True,
            )
            measure(
                "baseline: the old full refresh (every thread's detail, every run)",
                lambda: old.refresh_storage_conn(conn, keys, args.batch_rows, known_query=None),
                True,
            )
            measure(
                "incremental refresh, first run (no fingerprints yet: every thread)",
                lambda: storage.refresh_storage_conn(conn, keys, args.batch_rows, known_query=None),
                False,
            )
            t = time.perf_counter()
            written = agent_turns(dsn, args.existing, args.new)
            print(
                f"{len(written)} agent turns ({args.existing} existing threads, {args.new} new) in "
                f"{time.perf_counter() - t:.0f} s",
                flush=True,
            )
            measure(
                f"incremental refresh, second run after {len(written)} agent turns",
                lambda: storage.refresh_storage_conn(conn, keys, args.batch_rows, known_query=None),
                False,
            )
            measure(
                "incremental refresh, third run (nothing written since)",
                lambda: storage.refresh_storage_conn(conn, keys, args.batch_rows, known_query=None),
                False,
            )
    finally:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    baseline = rows[1][1]
    print(
        f"\n## storage refresh, {counts['writes']:,} checkpoint writes, {counts['checkpoints']:,} checkpoints, "
        f"{counts['blobs']:,} blobs (batches of {args.batch_rows:,} rows per table, no KNOWN_THREADS_QUERY)"
    )
    print("| run | seconds | x baseline | load (1 min) | result |\n|---|---:|---:|---:|---|")
    for label, seconds, load, done, orphans in rows:
        if isinstance(done, dict):
            result = f"{done['threads']:,} threads, {done['batches']} batches"
        else:
            detailed = getattr(done, "detailed", done.threads)
            result = (
                f"{done.threads:,} threads ({detailed:,} detailed), {done.batches} batches; orphans "
                f"{orphans['blobs']:,} blobs, {orphans['writes']:,} writes"
            )
        print(f"| {label} | {seconds:.1f} | {seconds / baseline:.2f} | {load:.1f} | {result} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
