"""Benchmark of history pruning (core/storage/prune.py): time, rows and bytes freed, and what it costs the agents'
concurrent writes (a stock PostgresSaver's put + put_writes latency while it runs vs without), then the VACUUM.

    python bench/bench_prune.py                          # 100k checkpoint writes, keep the latest 2
    python bench/bench_prune.py --writes 20000 --keep 5  # quick

Data: 4 threads written by the real agents (scripted model, stock PostgresSaver, the real serializer), their rows
replicated by COPY (bench/bench_decoder.replicate) until `checkpoint_writes` holds `--writes` rows, on a fresh database
of an embedded PostgreSQL (folder --data), then VACUUM ANALYZE. The writer is a stock PostgresSaver on its own pool
saving a 3-channel checkpoint (one list blob) and 2 writes per step on its own threads, as fast as it can.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_decoder import replicate, write_templates  # noqa: E402
from core.db import Database, embedded_dsn  # noqa: E402
from core.migrate import migrate  # noqa: E402
from core.storage import prune  # noqa: E402

DIMS = 64
BASELINE_S = 10.0
TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
SIZES = "SELECT " + ", ".join(
    f"(SELECT count(*) FROM {t}) AS {t}_rows, pg_total_relation_size('{t}') AS {t}_bytes" for t in TABLES
)


class Writer:
    """A stock PostgresSaver saving steps in a loop on its own threads; latencies (ms) of put + put_writes."""

    def __init__(self, dsn: str):
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg_pool import ConnectionPool

        self.pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=2,
            open=True,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        )
        self.saver = PostgresSaver(self.pool)
        self.stop = threading.Event()
        self.latencies: list[float] = []

    def step(self, n: int, config: dict) -> dict:
        from langgraph.checkpoint.base import empty_checkpoint

        checkpoint = empty_checkpoint()
        version = f"{n + 1:032d}.0.5"
        checkpoint["channel_values"] = {
            "messages": [f"mensaje {i}" for i in range(n % 20 + 1)],
            "step": n,
            "tool": "recordar_preferencia",
        }
        checkpoint["channel_versions"] = {"messages": version, "step": version, "tool": version}
        t = time.perf_counter()
        saved = self.saver.put(
            config,
            checkpoint,
            {"source": "loop", "step": n, "parents": {}},
            {"messages": version, "step": version, "tool": version},
        )
        self.saver.put_writes(saved, [("messages", [f"nuevo {n}"]), ("step", n + 1)], str(uuid.uuid4()))
        self.latencies.append((time.perf_counter() - t) * 1000)
        return saved

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            config = {"configurable": {"thread_id": f"writer-{uuid.uuid4()}", "checkpoint_ns": ""}}
            for _ in range(20):  # a thread of 20 steps
                config = self.step(n, config)
                n += 1

    def measure(self, during) -> tuple[list[float], object]:
        """Latencies while `during()` runs (or for `during` seconds), and its result."""
        self.latencies, self.stop = [], threading.Event()
        thread = threading.Thread(target=self.run)
        thread.start()
        try:
            result = time.sleep(during) if isinstance(during, (int, float)) else during()
        finally:
            self.stop.set()
            thread.join()
        return list(self.latencies), result


def summary(ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return f"{len(ms):,} saves, p50 {q[49]:.2f} ms, p95 {q[94]:.2f} ms, p99 {q[98]:.2f} ms, max {max(ms):.1f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=100_000, help="checkpoint_writes rows to prune from")
    parser.add_argument("--keep", type=int, default=2, help="checkpoints kept per thread and namespace")
    parser.add_argument("--data", type=Path, default=ROOT / ".data" / "bench_prune")
    args = parser.parse_args(argv)
    base = embedded_dsn(args.data)
    name = f"prune_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = psycopg.conninfo.make_conninfo(base, dbname=name)
    migrate(dsn, DIMS)
    db = Database(dsn)
    t = time.perf_counter()
    write_templates(db)
    print(replicate(dsn, args.writes), flush=True)
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("VACUUM ANALYZE")
        before = conn.execute(SIZES).fetchone()
        print(f"built in {time.perf_counter() - t:.0f} s: {before}", flush=True)
        policy = prune.validate_policy(args.keep)
        writer = Writer(dsn)
        baseline, _ = writer.measure(BASELINE_S)
        for table in TABLES:  # the baseline's own threads go: the prune then finds only the replicated ones
            conn.execute(f"DELETE FROM {table} WHERE thread_id LIKE 'writer-%'")
        conn.execute("VACUUM ANALYZE")
        t = time.perf_counter()
        dry = prune.prune_history(conn, policy, dry_run=True)
        dry_s = time.perf_counter() - t
        t0 = time.perf_counter()
        during, done = writer.measure(lambda: prune.prune_history(conn, policy))
        prune_s = time.perf_counter() - t0
        after = conn.execute(SIZES).fetchone()
        written = conn.execute("SELECT count(*) AS n FROM checkpoints WHERE thread_id LIKE 'writer-%'").fetchone()["n"]
        t = time.perf_counter()
        conn.execute("VACUUM (ANALYZE) checkpoints, checkpoint_blobs, checkpoint_writes")
        vacuum_s = time.perf_counter() - t
        vacuumed = conn.execute(SIZES).fetchone()
        writer.pool.close()
    assert (dry.checkpoints, dry.writes, dry.blobs) == (done.checkpoints, done.writes, done.blobs)
    assert written == len(during), (written, len(during))  # every checkpoint the writer saved meanwhile is there
    mb = lambda row: sum(row[f"{t}_bytes"] for t in TABLES) / 1e6  # noqa: E731
    print(
        f"\n## keep latest {args.keep}, {before['checkpoint_writes_rows']:,} checkpoint writes, "
        f"{before['checkpoints_rows']:,} checkpoints, {before['checkpoint_blobs_rows']:,} blobs ({mb(before):.1f} MB)"
    )
    print("| step | seconds | result |\n|---|---:|---|")
    print(
        f"| dry run (plan only) | {dry_s:.1f} | {dry.candidates:,} candidate threads, would free "
        f"{dry.bytes / 1e6:.1f} MB |"
    )
    print(
        f"| prune ({done.batches} batches of {prune.PRUNE_BATCH_THREADS} threads) | {prune_s:.1f} | "
        f"{len(done.threads):,} threads: {done.checkpoints:,} checkpoints, {done.writes:,} writes, "
        f"{done.blobs:,} blobs "
        f"deleted; {done.bytes / 1e6:.1f} MB of payload |"
    )
    print(
        f"| VACUUM (ANALYZE) of the three tables | {vacuum_s:.1f} | on-disk {mb(before):.1f} MB before, "
        f"{mb(after):.1f} MB after the prune, {mb(vacuumed):.1f} MB after VACUUM (space reusable, not returned) |"
    )
    print("\n| concurrent stock saver put + put_writes | latency |\n|---|---|")
    print(f"| without the prune ({BASELINE_S:.0f} s) | {summary(baseline)} |")
    print(f"| during the prune ({prune_s:.1f} s) | {summary(during)} |")
    print(
        f"\nThe writer's {written:,} checkpoints saved during the prune (after its cut) were all kept, and are in the "
        f"sizes after it."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
