"""What our triggers cost the agents' own writes: a stock PostgresSaver and a stock PostgresStore, with every
trigger of ours on their tables (found in pg_trigger) against the same database with those triggers disabled.

    python -m bench.bench_write_triggers --ops 200 --rounds 20

An embedded PostgreSQL of its own (folder --data), one migrated database. Each round runs the same batch
twice, once with the triggers enabled and once disabled (order alternating, so both see the same load);
the ratio is the median of the per-round ratios (enabled / disabled, ops per second). Measured:
- checkpoints: `put` + `put_writes` of a small checkpoint, on a new thread each time and 10 per thread
  (042: each statement lists its thread for the token index; a listed thread's row is only locked);
- memory: `PutOp` of a customer document with three string values (documents per prefix and root, per expiry day,
  who holds each value).
Nothing in it depends on the time it runs.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from pathlib import Path

import psycopg
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.store.base import PutOp
from langgraph.store.postgres import PostgresStore
from psycopg_pool import ConnectionPool

from core.db import embedded_dsn
from core.migrate import migrate

DIMS = 16


def our_triggers(dsn: str, tables: tuple[str, ...]) -> list[tuple[str, str]]:
    """Every trigger of ours (core_*) on `tables`, as (table, trigger)."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT tgrelid::regclass::text, tgname FROM pg_trigger "
            "WHERE NOT tgisinternal AND tgname LIKE 'core\\_%%' AND tgrelid = ANY(%s::regclass[]) ORDER BY 1, 2",
            (list(tables),),
        ).fetchall()


CHECKPOINT_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
STORE_TABLES = ("store", "store_vectors")


def set_triggers(dsn: str, triggers: list[tuple[str, str]], enabled: bool) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table, trigger in triggers:
            conn.execute(f'ALTER TABLE {table} {"ENABLE" if enabled else "DISABLE"} TRIGGER "{trigger}"')


def checkpoint_batch(saver: PostgresSaver, ops: int, turns: int) -> float:
    """ops/s of put + put_writes, `turns` of them per new thread (the first lists the thread; the next ones,
    while it is listed, only lock its row)."""
    start = time.perf_counter()
    thread = ""
    for n in range(ops):
        if n % turns == 0:
            thread = f"bench-{uuid.uuid4()}"
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        cp = empty_checkpoint()
        cp["channel_values"] = {"messages": [f"hola, soy el cliente {uuid.uuid4().hex[:6]}"]}
        cp["channel_versions"] = {"messages": 1}
        saved = saver.put(config, cp, {"source": "loop", "step": 1}, {"messages": 1})
        saver.put_writes(saved, [("messages", "recibido")], task_id=str(uuid.uuid4()))
    return ops / (time.perf_counter() - start)


def store_batch(store: PostgresStore, ops: int) -> float:
    start = time.perf_counter()
    for n in range(ops):
        customer = f"B{uuid.uuid4().hex[:8]}"
        store.batch(
            [
                PutOp(
                    ("clientes", customer),
                    "pref-recogida",
                    {"texto": f"recoger en T00{n % 9}", "tienda": "T002", "hilo": f"conv-{customer}"},
                )
            ]
        )
    return ops / (time.perf_counter() - start)


def compare(name: str, dsn: str, triggers: list[tuple[str, str]], batch, rounds: int) -> dict:
    """Our `triggers` enabled or disabled before each batch."""
    assert triggers, name  # a comparison with nothing toggled would measure noise

    def switch(enabled: bool) -> None:
        set_triggers(dsn, triggers, enabled)

    ratios, on_all, off_all = [], [], []
    for r in range(rounds):
        result = {}
        for enabled in (True, False) if r % 2 == 0 else (False, True):
            switch(enabled)
            result[enabled] = batch()
        switch(True)
        ratios.append(result[True] / result[False])
        on_all.append(result[True])
        off_all.append(result[False])
    return {
        "name": name,
        "on": statistics.median(on_all),
        "off": statistics.median(off_all),
        "ratio": statistics.median(ratios),
        "low": min(ratios),
        "high": max(ratios),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(".data/bench_write_triggers"))
    parser.add_argument("--ops", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)
    base = embedded_dsn(args.data)
    name = f"bench_triggers_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = psycopg.conninfo.make_conninfo(base, dbname=name)
    migrate(dsn, DIMS)
    pool = ConnectionPool(dsn, kwargs={"autocommit": True, "prepare_threshold": 0}, open=True)
    try:
        saver, store = PostgresSaver(pool), PostgresStore(pool)
        on_checkpoints, on_store = our_triggers(dsn, CHECKPOINT_TABLES), our_triggers(dsn, STORE_TABLES)
        print("toggled:", ", ".join(f"{t}.{g}" for t, g in on_checkpoints + on_store), "\n")
        rows = [
            compare(
                "stock PostgresSaver put + put_writes, each on a new thread",
                dsn,
                on_checkpoints,
                lambda: checkpoint_batch(saver, args.ops, 1),
                args.rounds,
            ),
            compare(
                "stock PostgresSaver put + put_writes, 10 per thread (a conversation)",
                dsn,
                on_checkpoints,
                lambda: checkpoint_batch(saver, args.ops, 10),
                args.rounds,
            ),
            compare(
                "stock PostgresStore put (customer document, 3 string values)",
                dsn,
                on_store,
                lambda: store_batch(store, args.ops),
                args.rounds,
            ),
        ]
    finally:
        pool.close()
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    print(
        f"median of {args.rounds} rounds of {args.ops} ops; baseline: the same database, every trigger of ours on "
        "the written tables disabled\n"
    )
    print("| writes | with our triggers (ops/s) | triggers disabled (ops/s) | ratio (lowest-highest round) |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['name']} | {row['on']:,.0f} | {row['off']:,.0f} | "
            f"{row['ratio']:.3f} ({row['low']:.3f}-{row['high']:.3f}) |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
