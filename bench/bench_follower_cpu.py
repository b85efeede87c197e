"""What does the change follower cost the database server's CPU (issue 37)? The agents' write-rate ratios of
bench/bench_capture.py move by +-5 % from run to run on this 2-core machine; this measures the follower's share
directly: the CPU time (utime + stime from /proc) of the PostgreSQL backend that decodes and applies for the
follower, per 1,000 agent writes (and against the CPU of the writer's own backend, the agents' side), while
`--writes` stock `PostgresStore.put`s are made at `--rate` per second (0: as fast as one connection goes; numbered
documents, fixed count: the same work every run; `--vectors`: with the seed's vector index, whose HNSW pages make
most of the WAL the follower reads past). Two follower configurations, each on a fresh database of one embedded
PostgreSQL 18 (`wal_level = logical`), the follower a thread polling every 0.5 s (IDLE_SLEEP_S) like the dashboard's:

- **baseline: main at 49cf832**, the shadow row of every document a batch touches read first, and each batch's
  rows written with `executemany` of one-row upserts (the statements of then, rebuilt below from today's);
- **shipped**: no shadow row read for a document the batch first inserts, and one statement per aggregate per batch
  (arrays, `unnest`).

Both write a running-transactions record after each batch they applied (SNAPSHOT_S). Writing it just before a read
that starts behind instead, so that the next read would not decode the batch before again, was measured and
dropped: 0.47 s both ways at 300 puts/s, 0.20 and 0.22 s at full rate with vectors.

    python -m bench.bench_follower_cpu --writes 6000 --rate 300
    python -m bench.bench_follower_cpu --writes 4000 --rate 0 --vectors
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

import psycopg
from langgraph.store.postgres import PostgresStore

from bench.bench_capture import fresh_database, logical_server
from core.capture import changes
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


def _every_store_key(txns: list[changes.Transaction]) -> set[tuple[str, str]]:
    """Main at 49cf832's changes.store_keys: the shadow row of every document the batch touches is read."""
    return {(e.prefix, e.key) for t in txns for e in t.events if isinstance(e, changes.Put | changes.Gone)}


class Baseline(fmod.Follower):
    """Main at 49cf832: every touched document's shadow row read, the batches applied with one-row upserts."""

    @staticmethod
    def _fold(
        links: fmod.Links, txns: list[changes.Transaction], shadow_keys: Callable = _every_store_key
    ) -> fmod.Deltas:
        return fmod.Follower._fold(links, txns, shadow_keys)

    @staticmethod
    def _apply(conn: psycopg.Connection, d: fmod.Deltas) -> None:
        class Conn:
            def cursor(self) -> _RowByRowCursor:
                return _RowByRowCursor(conn.cursor())

        fmod.Follower._apply(Conn(), d)  # type: ignore[arg-type]


CONFIGURATIONS: dict[str, type[fmod.Follower]] = {"baseline (49cf832)": Baseline, "shipped": fmod.Follower}


def paced_puts(
    store: PostgresStore,
    writes: int,
    rate: float,
    value: Callable[[int], dict],
    *,
    index: Literal[False] | None = False,
) -> float:
    """`writes` stock puts of numbered customer documents, `rate` a second (0: as fast as they go): seconds taken."""
    t0 = time.monotonic()
    for i in range(writes):
        store.put(("clientes", f"C{i % 500}"), f"nota-{i}", value(i), index=index)
        delay = t0 + (i + 1) / rate - time.monotonic() if rate else 0
        if delay > 0:
            time.sleep(delay)
    return time.monotonic() - t0


def run(
    base: str, name: str, follower_class: type[fmod.Follower], writes: int, rate: float, vectors: bool
) -> dict[str, float]:
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
            seconds = paced_puts(
                store,
                writes,
                rate,
                lambda i: {"texto": f"recoger en tienda T00{i % 9}, nota {i}", "i": i},
                index=None if vectors else False,
            )
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
    parser.add_argument("--rate", type=float, default=300.0, help="writes per second; 0: as fast as they go")
    parser.add_argument("--vectors", action="store_true", help="puts with the seed's vector index")
    args = parser.parse_args()
    _data, base = logical_server(None, "bench-follower-cpu-")
    results = {}
    for i, (label, follower_class) in enumerate(CONFIGURATIONS.items()):
        results[label] = run(base, f"cpu_{i}", follower_class, args.writes, args.rate, args.vectors)
        r = results[label]
        print(
            f"{label}: {args.writes:,} writes in {r['seconds']:.1f} s, follower backend CPU {r['cpu']:.2f} s "
            f"({r['cpu'] / args.writes * 1000:.3f} s per 1,000 writes); the writer's own backend {r['writer']:.2f} s",
            flush=True,
        )
    base_cpu = results["baseline (49cf832)"]["cpu"]
    print(
        "\n| follower | its backend CPU (s) | per 1,000 writes (s) | vs baseline | writer's backend CPU (s) "
        "| follower / writer |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for label, r in results.items():
        print(
            f"| {label} | {r['cpu']:.2f} | {r['cpu'] / args.writes * 1000:.3f} "
            f"| {r['cpu'] / base_cpu:.2f} | {r['writer']:.2f} "
            f"| {r['cpu'] / r['writer']:.2f} |"
        )


if __name__ == "__main__":
    main()
