"""What our triggers cost the agents' own writes: a stock PostgresSaver and a stock PostgresStore, with our
triggers on their tables (migrations 042, 043, 046) against the same database with those triggers disabled.

    python -m bench.bench_write_triggers --ops 200 --rounds 20

An embedded PostgreSQL of its own (folder --data), one migrated database. Each round runs the same batch
twice, once with the triggers enabled and once disabled (order alternating, so both see the same load);
the ratio is the median of the per-round ratios (enabled / disabled, ops per second). Measured:
- checkpoints: `put` + `put_writes` of a small checkpoint, on a new thread each time and 10 per thread
  (042: each statement lists its thread for the token index; a listed thread's row is only locked);
- memory: `PutOp` of a customer document with three string values (043: who holds each value); then the same
  with only the prefix-count triggers toggled (007, whose statements also keep 046's per-root totals).
Nothing in it depends on the time it runs.
"""
from __future__ import annotations

import argparse
import re
import statistics
import time
import uuid
from pathlib import Path
from typing import Callable

import psycopg
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.store.base import PutOp
from langgraph.store.postgres import PostgresStore
from psycopg_pool import ConnectionPool

from core.db import embedded_dsn
from core.migrate import migrate

DIMS = 16
TOKENS_DIRTY = ["core_tokens_dirty_insert", "core_tokens_dirty_update"]
TRIGGERS = {  # what is toggled -> (table, trigger) pairs
    "token index": [(t, trigger) for t in ("checkpoints", "checkpoint_blobs", "checkpoint_writes") for trigger in TOKENS_DIRTY],
    "value holders": [("store", f"core_value_holders_{op}") for op in ("ins", "upd", "del")],
    "prefix and root counts": [("store", f"core_prefix_counts_{op}") for op in ("ins", "upd", "del")],
}


def set_triggers(dsn: str, groups: list[str], enabled: bool) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for group in groups:
            for table, trigger in TRIGGERS[group]:
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
        store.batch([PutOp(("clientes", customer), "pref-recogida",
                           {"texto": f"recoger en T00{n % 9}", "tienda": "T002", "hilo": f"conv-{customer}"})])
    return ops / (time.perf_counter() - start)


def prefix_count_functions(path: str) -> list[str]:
    """The CREATE OR REPLACE FUNCTION statements of core_prefix_counts_* in one of our migrations."""
    text = (Path(__file__).parent.parent / "core" / "sql" / path).read_text()
    return re.findall(r"CREATE OR REPLACE FUNCTION core_prefix_counts_\w+\(\).*?END \$\$;", text, re.S)


def use_functions(dsn: str, definitions: list[str]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for definition in definitions:
            conn.execute(definition)


def compare(name: str, dsn: str, groups: list[str], batch, rounds: int,
            switch: Callable[[bool], None] | None = None) -> dict:
    """`switch(enabled)` (default: our triggers of `groups` enabled or disabled) before each batch."""
    switch = switch or (lambda enabled: set_triggers(dsn, groups, enabled))
    ratios, on_all, off_all = [], [], []
    for r in range(rounds):
        result = {}
        for enabled in ((True, False) if r % 2 == 0 else (False, True)):
            switch(enabled)
            result[enabled] = batch()
        switch(True)
        ratios.append(result[True] / result[False])
        on_all.append(result[True])
        off_all.append(result[False])
    return {"name": name, "on": statistics.median(on_all), "off": statistics.median(off_all),
            "ratio": statistics.median(ratios), "low": min(ratios), "high": max(ratios)}


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
        # 007's functions as 043 left them (SECURITY DEFINER), against 046's
        with_roots = prefix_count_functions("046_root_counts.sql")
        without_roots = prefix_count_functions("007_prefix_counts.sql") + [
            f"ALTER FUNCTION core_prefix_counts_{op}() SECURITY DEFINER SET search_path FROM CURRENT"
            for op in ("add", "remove", "update", "truncate")]
        assert len(with_roots) == 4 and len(without_roots) == 8
        rows = [
            compare("stock PostgresSaver put + put_writes, each on a new thread", dsn,
                    ["token index"], lambda: checkpoint_batch(saver, args.ops, 1), args.rounds),
            compare("stock PostgresSaver put + put_writes, 10 per thread (a conversation)", dsn,
                    ["token index"], lambda: checkpoint_batch(saver, args.ops, 10), args.rounds),
            compare("stock PostgresStore put (customer document, 3 string values): value holders (043)", dsn,
                    ["value holders"], lambda: store_batch(store, args.ops), args.rounds),
            compare("stock PostgresStore put: prefix counts (007) with per-root totals (046)", dsn,
                    ["prefix and root counts"], lambda: store_batch(store, args.ops), args.rounds),
            compare("stock PostgresStore put: 007's functions with 046's per-root totals vs 007's own "
                    "(baseline column: 007's)", dsn, [], lambda: store_batch(store, args.ops), args.rounds,
                    switch=lambda new: use_functions(dsn, with_roots if new else without_roots)),
        ]
    finally:
        pool.close()
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    print(f"median of {args.rounds} rounds of {args.ops} ops; baseline: the same database, our triggers disabled\n")
    print("| writes | with our triggers (ops/s) | triggers disabled (ops/s) | ratio (lowest-highest round) |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print(f"| {row['name']} | {row['on']:,.0f} | {row['off']:,.0f} | "
              f"{row['ratio']:.3f} ({row['low']:.3f}-{row['high']:.3f}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
