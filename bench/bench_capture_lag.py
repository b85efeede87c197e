"""Does the change follower keep up (issue 37)? Three measurements on one embedded PostgreSQL 18 (`wal_level =
logical`), a database with everything the dashboard installs, the follower as its own process
(`python -m core.capture.follower`, poll 0.05 s):

1. **peak**: stock `PostgresStore.put` of customer documents from `--threads` threads as fast as they go for
   `--seconds`: the agents' peak write rate on this machine, and the follower's lag meanwhile;
2. **paced**: the same puts paced at `--rate` writes per second (default 1,000) for `--seconds`;
3. **backlog**: the follower stopped, `--backlog` documents (default 1,000,000) written with COPY (values made as
   `recordar_preferencia` makes them, a `hilo` link each), then the follower started: time until it has applied
   everything, and every aggregate equals a recount.

Lag is measured as an erasure sees it: a probe takes the flushed WAL end (core.capture.follower.flush_target) and
waits until the follower's saved position reaches it; the probe runs every 0.2 s. Printed: p50/p95/max of the
probes. Nothing depends on the time it runs (documents and keys are numbered, not dated).

    python -m bench.bench_capture_lag --threads 4 --seconds 20 --rate 1000 --backlog 1000000
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
from langgraph.store.postgres import PostgresStore
from psycopg_pool import ConnectionPool

from bench.bench_capture import fresh_database, logical_server
from core.capture.follower import catch_up, caught_up_lsn, drop_slot, flush_target, slot_name_for
from core.capture.verify import differences
from core.migrate import migrate

ROOT = Path(__file__).resolve().parent.parent
DIMS = 64
TIPOS = ("recogida", "contacto", "idioma", "horario")


def _database(base: str, name: str) -> str:
    dsn = fresh_database(base, name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        PostgresStore(conn).setup()
    migrate(dsn, DIMS)
    catch_up(dsn)  # the slot
    return dsn


def _value(n: int) -> dict:
    tipo = TIPOS[n % len(TIPOS)]
    return {"tipo": tipo, "valor": f"valor {n}", "hilo": f"cliente-C{n % 5000}-{n % 7}"}


def _follower(dsn: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "core.capture.follower", dsn, "--idle-sleep", "0.05"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=open(log, "a"),
    )


class Probe(threading.Thread):
    """Every 0.2 s: how long until the follower has applied everything flushed when the probe started."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.lags, self.stop = dsn, [], threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            slot = slot_name_for(conn.info.dbname)
            while not self.stop.is_set():
                start = time.monotonic()
                target = flush_target(conn)
                while caught_up_lsn(conn, slot) < target and not self.stop.is_set():
                    time.sleep(0.01)
                self.lags.append(time.monotonic() - start)
                self.stop.wait(0.2)


def _puts(pool: ConnectionPool, first: int, stop: threading.Event, counter: list[int], rate: float | None) -> None:
    store = PostgresStore(pool)
    n = first
    start = time.monotonic()
    while not stop.is_set():
        store.put(("clientes", f"C{n % 5000}"), f"pref-{TIPOS[n % 4]}-{n}", _value(n), index=False)
        n += 1
        counter[0] += 1
        if rate is not None:  # paced: this thread's share of the rate
            ahead = (n - first) / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)


def run_writes(dsn: str, threads: int, seconds: float, rate: float | None, first: int) -> dict:
    probe = Probe(dsn)
    stop = threading.Event()
    counters = [[0] for _ in range(threads)]
    with ConnectionPool(dsn, min_size=threads, max_size=threads, kwargs={"autocommit": True}) as pool:
        workers = [
            threading.Thread(
                target=_puts,
                args=(pool, first + i * 10_000_000, stop, counters[i], rate / threads if rate else None),
            )
            for i in range(threads)
        ]
        probe.start()
        start = time.monotonic()
        for w in workers:
            w.start()
        time.sleep(seconds)
        stop.set()
        for w in workers:
            w.join()
        took = time.monotonic() - start
    probe.stop.set()
    probe.join()
    lags = sorted(probe.lags)
    return {
        "writes_per_s": sum(c[0] for c in counters) / took,
        "probes": len(lags),
        "lag_p50_s": statistics.median(lags),
        "lag_p95_s": lags[int(0.95 * (len(lags) - 1))],
        "lag_max_s": lags[-1],
    }


def run_backlog(dsn: str, rows: int, log: Path) -> dict:
    start = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.cursor().copy("COPY store (prefix, key, value) FROM STDIN") as copy:
            for n in range(rows):
                copy.write_row((f"clientes.B{n % 50_000}", f"pref-{TIPOS[n % 4]}-{n}", json.dumps(_value(n))))
    wrote = time.monotonic() - start
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn) FROM pg_replication_slots "
            "WHERE slot_name = %s",
            (slot_name_for(conn.info.dbname),),
        ).fetchone()
    retained = float(row[0]) if row else 0.0
    start = time.monotonic()
    proc = _follower(dsn, log)
    try:
        catch_up(dsn, timeout=3600)
    finally:
        proc.terminate()
        proc.wait(30)
    return {"rows": rows, "copy_s": wrote, "retained_mb": retained / 1e6, "apply_s": time.monotonic() - start}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rate", type=float, default=1000)
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument("--data", type=Path, default=None)
    args = parser.parse_args()
    data, base = logical_server(args.data, "bench-capture-lag-")
    dsn = _database(base, "bench_capture_lag")
    log = data / "follower.log"
    proc = _follower(dsn, log)
    try:
        peak = run_writes(dsn, args.threads, args.seconds, None, 0)
        print(f"peak   {json.dumps(peak)}", flush=True)
        paced = run_writes(dsn, args.threads, args.seconds, args.rate, 100_000_000)
        print(f"paced  {json.dumps(paced)}", flush=True)
    finally:
        proc.terminate()
        proc.wait(30)
    catch_up(dsn)
    backlog = run_backlog(dsn, args.backlog, log)
    diff = differences(dsn)
    print(f"backlog {json.dumps(backlog)}; every aggregate equals a recount: {not diff}", flush=True)
    drop_slot(dsn)

    def lags(r: dict) -> str:
        return f"{r['lag_p50_s']:.2f} / {r['lag_p95_s']:.2f} / {r['lag_max_s']:.2f} s"

    print("\n| measurement | figure |\n|---|---:|")
    print(f"| peak stock puts ({args.threads} threads) | {peak['writes_per_s']:,.0f} writes/s |")
    print(f"| lag at peak: p50 / p95 / max | {lags(peak)} |")
    print(f"| paced rate reached (target {args.rate:,.0f}/s) | {paced['writes_per_s']:,.0f} writes/s |")
    print(f"| lag paced: p50 / p95 / max | {lags(paced)} |")
    print(
        f"| backlog of {args.backlog:,} documents (COPY {backlog['copy_s']:.0f} s, "
        f"{backlog['retained_mb']:,.0f} MB of WAL retained): applied in | {backlog['apply_s']:,.0f} s |"
    )
    print(f"| every aggregate equals a recount after the backlog | {not diff} |")


if __name__ == "__main__":
    main()
