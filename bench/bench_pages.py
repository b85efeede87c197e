"""Page queries and full page renders at production size, against their naive baselines.

    python -m bench.bench_pages --sizes 100000 1000000
    python -m bench.bench_pages --sizes 10000000 --max-slot-wal-keep-size 16GB

For each size: a fresh database on an embedded PostgreSQL (folder --data, default .data/bench),
migrations, bulk data from bench/generate_store.py, then for each store page's core function the
median of 5 warm runs next to the naive query it replaced (live GROUP BY over `store`), and each
page's full AppTest render with an empty data cache. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time
from datetime import date, timedelta
from pathlib import Path

import psycopg

from bench.generate_store import generate
from core.capture.follower import catch_up, drop_slot
from core.db import Database, dashboard_dsn_for, embedded_dsn
from core.memory import preferences, reads
from core.migrate import migrate

DIMS = 64
NAIVE = {
    "memory_totals": """SELECT (SELECT count(*) FROM store), (SELECT count(*) FROM store WHERE expires_at < now()),
                               (SELECT count(*) FROM store_vectors), (SELECT count(DISTINCT prefix) FROM store)""",
    "documents_by_root": """SELECT split_part(prefix, '.', 1), count(*), count(DISTINCT prefix),
                                   count(*) FILTER (WHERE expires_at < now()) FROM store GROUP BY 1""",
    "top_prefixes": "SELECT prefix, count(*) FROM store GROUP BY prefix ORDER BY 2 DESC, prefix LIMIT 20",
    "oversized_customers": """SELECT prefix, count(*), string_agg(key, ', ') FROM store WHERE prefix LIKE 'clientes.%'
                                     GROUP BY prefix HAVING count(*) > 4 ORDER BY 2 DESC LIMIT 200""",
}


SLOW_MS = 10_000.0  # a call this slow is timed once: its median over runs would cost minutes at 10M


def median_ms(fn, runs: int = 5) -> float:
    """Median of `runs` timed calls after a warm one; a warm call over SLOW_MS is timed once more only."""
    t = time.perf_counter()
    fn()
    if (time.perf_counter() - t) * 1000 > SLOW_MS:
        runs = 1
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def database(base_dsn: str, size: int) -> tuple[str, bool]:
    name = f"bench_store_{size}"
    with psycopg.connect(base_dsn, autocommit=True) as conn:
        fresh = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None
        if fresh:
            conn.execute(f'CREATE DATABASE "{name}"')
    return psycopg.conninfo.make_conninfo(base_dsn, dbname=name), fresh


def page_render_ms(
    dsn: str,
    page: str | None,
    query_params: dict[str, str] | None = None,
    click: str | None = None,
    runs: int = 3,
    timeout: float = 120,
) -> float:
    """Median ms of `runs` full AppTest runs of `page` with an empty data cache; `query_params` are set
    before the first run, `click` is the key of a button clicked in each timed run (else a plain rerun).
    A run over SLOW_MS ends the series; `timeout` bounds each run (AppTest raises past it)."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    os.environ.update({"PG_AGENTES": dsn, "EMBEDDINGS_DIMS": str(DIMS), "AUTO_MIGRATE": "0", "SEED_DEMO": "0"})
    ours = dashboard_dsn_for(dsn)  # the dashboard's own database, where the bench keeps one (PG_DASHBOARD)
    if ours != dsn:
        os.environ["PG_DASHBOARD"] = ours
    else:
        os.environ.pop("PG_DASHBOARD", None)
    st.cache_resource.clear()
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "dashboard.py"), default_timeout=timeout)
    for key, value in (query_params or {}).items():
        at.query_params[key] = value
    at.run()  # warm: imports, pool, bootstrap
    if page:
        at.switch_page(page).run()
    times = []
    for _ in range(runs):
        st.cache_data.clear()
        t = time.perf_counter()
        if click:
            at.button(key=click).click().run()
        else:
            at.run()
        times.append((time.perf_counter() - t) * 1000)
        assert not at.exception, at.exception
        if times[-1] > SLOW_MS:
            break
    return statistics.median(times)


def run(sizes: list[int], data: Path, slot_keep: str | None = None) -> list[tuple]:
    base = embedded_dsn(data)
    if slot_keep:  # the follower's recount at creation writes ~4x the store's size of WAL, which the slot keeps
        if not re.fullmatch(r"\d+(kB|MB|GB|TB)?", slot_keep):
            raise SystemExit(f"--max-slot-wal-keep-size {slot_keep!r}: a size such as 16GB")
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"ALTER SYSTEM SET max_slot_wal_keep_size = '{slot_keep}'")
            conn.execute("SELECT pg_reload_conf()")
    today = date.today()
    month = (today - timedelta(days=29), today)
    rows = []
    for size in sizes:
        dsn, fresh = database(base, size)
        migrate(dsn, DIMS)
        if fresh:
            print(f"generating {size:,} documents ...", flush=True)
            print(generate(dsn, size, size // 4), flush=True)
        catch_up(dsn, timeout=3600)  # the change follower's slot (its recount at creation) or what it holds
        db = Database(dsn)
        calls = {
            "memory_totals": lambda db=db: reads.memory_totals(db),
            "documents_by_root": lambda db=db: reads.documents_by_root(db),
            "top_prefixes": lambda db=db: reads.top_prefixes(db, 20),
            "oversized_customers": lambda db=db: reads.oversized_customers(db),
            "find_namespaces": lambda db=db: reads.find_namespaces(db, "C9"),
            "namespace_items": lambda db=db: reads.namespace_items(db, "clientes.C9", 50, 0),
            "suggest_namespaces (common start)": lambda db=db: reads.suggest_namespaces(db, "C9"),
            "suggest_namespaces (no match)": lambda db=db: reads.suggest_namespaces(db, "no-such-id"),
            "preference_daily": lambda db=db: preferences.preference_daily(db, *month),
            "preference_by_tipo": lambda db=db: preferences.preference_by_tipo(db, *month),
            "writing_conversations": lambda db=db: preferences.writing_conversations(db, *month, 50, 0),
        }
        for name, call in calls.items():
            ms = median_ms(call)
            naive = NAIVE.get(name)
            base_ms = median_ms(lambda db=db, naive=naive: db.fetch(naive.replace("%", "%%"))) if naive else None
            rows.append((size, f"query {name}", ms, "naive live GROUP BY" if naive else "-", base_ms))
        for label, page in (
            ("page Memoria (render)", None),
            ("page Preferencias (render)", "app_pages/preferences.py"),
        ):
            rows.append((size, label, page_render_ms(dsn, page), "-", None))
        db.close()
        drop_slot(dsn)  # kept, the slot would hold the server's WAL until the next run
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--data", type=Path, default=Path(".data/bench"))
    parser.add_argument(
        "--max-slot-wal-keep-size",
        help="set on the bench's server before the follower's recount (10M documents: 16GB; docs/operator.md)",
    )
    args = parser.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    rows = run(args.sizes, args.data, args.max_slot_wal_keep_size)
    print("\n| documents | figure | ms (median) | baseline | baseline ms | speed-up |")
    print("|---:|---|---:|---|---:|---:|")
    for size, label, ms, base_label, base_ms in rows:
        ratio = f"{base_ms / ms:.1f}x" if base_ms else "-"
        print(
            f"| {size:,} | {label} | {ms:.1f} | {base_label} | {'-' if base_ms is None else f'{base_ms:.1f}'} "
            f"| {ratio} |"
        )


if __name__ == "__main__":
    main()
