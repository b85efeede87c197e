"""What does the change follower cost the database server's CPU (issue 37)? The agents' write-rate ratios of
bench/bench_capture.py move by +-5 % from run to run on this 2-core machine; this measures the follower's share
directly: the CPU time (utime + stime from /proc) of the PostgreSQL backend that decodes and applies for the
follower, per 1,000 agent writes (and against the CPU of the writer's own backend, the agents' side), while
`--writes` stock `PostgresStore.put`s are made at `--rate` per second (numbered documents, fixed count: the same
work every run). Two follower configurations, each on a fresh database of one embedded PostgreSQL 18
(`wal_level = logical`), the follower a thread polling every 0.5 s (IDLE_SLEEP_S) like the dashboard's:

- **baseline: row by row**, the follower before its upserts were set-based: each batch's rows written with
  `executemany` of one-row upserts (the statements of main before this change, rebuilt below from today's);
- **set-based**: the follower as shipped, one statement per aggregate per batch (arrays, `unnest`).

    python -m bench.bench_follower_cpu --writes 6000 --rate 300
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from typing import Any

import psycopg

from bench.bench_capture import fresh_database, logical_server
from core.capture import follower as fmod
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store
from core.migrate import migrate

DIMS = 64
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


# The one-row forms of today's set-based upserts: same conflict clauses, one VALUES row per execution.
ROW_BY_ROW = {
    sql: sql.split("\nSELECT", 1)[0] + f" VALUES ({values})\nON CONFLICT" + sql.split("ON CONFLICT", 1)[1]
    for sql, values in (
        (fmod.UPSERT_PREFIX, "%s, %s, %s::timestamptz"),
        (fmod.UPSERT_ROOT, "%s, 0, %s, %s, %s"),
        (fmod.UPSERT_EXPIRY, "%s::date, %s, %s"),
        (fmod.UPSERT_HOLDERS, "%s, %s, %s"),
        (fmod.UPSERT_SHADOW, "%s, %s, %s::date, %s::bigint[], %s"),
    )
}


class _RowByRowCursor:
    def __init__(self, cursor: psycopg.Cursor) -> None:
        self._cursor = cursor

    def execute(self, sql: Any, params: Any = None) -> psycopg.Cursor:
        if sql in ROW_BY_ROW:  # columns back to rows
            self._cursor.executemany(ROW_BY_ROW[sql], list(zip(*params, strict=True)))
            return self._cursor
        return self._cursor.execute(sql, params)


class RowByRow(fmod.Follower):
    """The baseline: the follower's batches applied with one-row upserts."""

    @staticmethod
    def _apply(conn: psycopg.Connection, d: fmod.Deltas) -> None:
        class Conn:
            def cursor(self) -> _RowByRowCursor:
                return _RowByRowCursor(conn.cursor())

        fmod.Follower._apply(Conn(), d)  # type: ignore[arg-type]


def run(base: str, name: str, follower_class: type[fmod.Follower], writes: int, rate: float) -> dict[str, float]:
    dsn = fresh_database(base, name)
    migrate(dsn, DIMS)
    fmod.catch_up(dsn)  # slot and recount before the measured writes
    follower = follower_class(dsn)
    stop = threading.Event()
    thread = threading.Thread(target=follower.run, kwargs={"stop": stop}, daemon=True)
    thread.start()
    with psycopg.connect(dsn, autocommit=True) as conn:
        pid = None
        while pid is None:  # the follower's own connection: the backend that decodes
            row = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'core_capture' AND datname = %s",
                (name,),
            ).fetchone()
            pid = row[0] if row else None
            time.sleep(0.05)
        start_cpu = cpu_seconds(pid)
        with psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=psycopg.rows.dict_row) as w:
            store = build_store(w, OfflineHashEmbeddings(DIMS), DIMS)
            writer_pid = w.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]
            writer_start = cpu_seconds(writer_pid)
            t0 = time.monotonic()
            for i in range(writes):
                store.put(("clientes", f"C{i % 500}"), f"nota-{i}", {"texto": f"nota {i}", "i": i}, index=False)
                delay = t0 + (i + 1) / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            seconds = time.monotonic() - t0
            writer = cpu_seconds(writer_pid) - writer_start
        fmod.catch_up(dsn, timeout=120)
        used = cpu_seconds(pid) - start_cpu
    stop.set()
    thread.join(10)
    fmod.drop_slot(dsn)
    return {"cpu": used, "writer": writer, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writes", type=int, default=6000)
    parser.add_argument("--rate", type=float, default=300.0)
    args = parser.parse_args()
    _data, base = logical_server(None, "bench-follower-cpu-")
    results = {}
    for label, follower_class in (("row by row", RowByRow), ("set-based", fmod.Follower)):
        results[label] = run(base, f"cpu_{label.replace(' ', '_')}", follower_class, args.writes, args.rate)
        r = results[label]
        print(
            f"{label}: {args.writes:,} writes in {r['seconds']:.1f} s, follower backend CPU {r['cpu']:.2f} s "
            f"({r['cpu'] / args.writes * 1000:.3f} s per 1,000 writes); the writer's own backend {r['writer']:.2f} s",
            flush=True,
        )
    base_cpu = results["row by row"]["cpu"]
    ratio = results["set-based"]["cpu"] / base_cpu if base_cpu else float("nan")
    print(
        "\n| follower | its backend CPU (s) | per 1,000 writes (s) | vs baseline | writer's backend CPU (s) "
        "| follower / writer |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for label, r in results.items():
        print(
            f"| {label} | {r['cpu']:.2f} | {r['cpu'] / args.writes * 1000:.3f} "
            f"| {'1.00' if label == 'row by row' else f'{ratio:.2f}'} | {r['writer']:.2f} "
            f"| {r['cpu'] / r['writer']:.2f} |"
        )


if __name__ == "__main__":
    main()
