"""Benchmark: the complete erasure of a 2,500-document customer (core.erasure.erase) against the
seed's loop (`store.search(ns, limit=1000)` then `store.delete` per item), on identical copies of
the same data (CREATE DATABASE ... TEMPLATE) in the same run.

    python bench/bench_erasure.py                 # 2,500 docs, 5 rounds
    python bench/bench_erasure.py --docs 10000 --rounds 3

Data, through the real code paths: the customer's documents are written with the store's own
`batch` of `PutOp`s with `index=["texto"]` (so every document has its `store_vectors` row), 20% of
them in a nested namespace ("clientes", id, "pedidos"); 3 conversations by the real customer agent
(scripted model, PostgresSaver) give checkpoint threads and log rows; 500 other customers
(look-alike ids included: C_9, C19, CA9, C9x) hold 4 documents each and must keep them.

Measured per round, each on a fresh copy:
- seed loop: the seed's loop, as written (one search with limit=1000 on the agents' store, which
  also refreshes the TTL of what it reads, then one delete per item); what it leaves behind is counted.
- seed loop until empty: the same loop repeated until its search is empty (the same store documents
  deleted as the erasure; threads and logs still left behind).
- erasure: `core.erasure.erase` end to end: dry counts, paged search + batched deletes until empty,
  delete_thread per thread, our logs, the literal evidence queries, the register row.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from langgraph.checkpoint.postgres import PostgresSaver  # noqa: E402
from langgraph.store.base import PutOp  # noqa: E402

from core.agents.retail import ContextoCliente, build_agent, run_turn  # noqa: E402
from core.agents.scripted_model import ScriptedChatModel  # noqa: E402
from core.db import Database, embedded_dsn, reset_pool  # noqa: E402
from core.memory.embeddings import OfflineHashEmbeddings  # noqa: E402
from core.memory.store import build_store, ttl_for  # noqa: E402
from core.migrate import migrate  # noqa: E402
from core.privacy import erasure, evidence  # noqa: E402

DIMS = 64
CUSTOMER = "C9"
LOOK_ALIKES = ["C_9", "C19", "CA9", "C9x"]


def dsn_for(base: str, name: str) -> str:
    return psycopg.conninfo.make_conninfo(base, dbname=name)


def populate(db: Database, docs: int, others: int, customer: str = CUSTOMER) -> None:
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    ops = []
    for i in range(docs):
        ns = ("clientes", customer, "pedidos") if i % 5 == 0 else ("clientes", customer)
        ops.append(
            PutOp(
                ns,
                f"doc-{i}",
                {"texto": f"pedido {i} recogida en la tienda Gran Vía"},
                index=["texto"],
                ttl=ttl_for(ns),
            )
        )
    for n in range(others):
        cid = LOOK_ALIKES[n] if n < len(LOOK_ALIKES) else f"C{1000 + n}"
        for k in range(4):
            ops.append(
                PutOp(
                    ("clientes", cid),
                    f"pref-{k}",
                    {"texto": f"preferencia {k} de {cid}"},
                    index=["texto"],
                    ttl=ttl_for(("clientes", cid)),
                )
            )
    for start in range(0, len(ops), 1000):
        store.batch(ops[start : start + 1000])
    agent = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(db.pool))
    for k in range(1, 4):
        run_turn(agent, ContextoCliente(customer), f"cliente-{customer}-{k}", "Prefiero que me atendáis en catalán.")
        run_turn(agent, ContextoCliente(customer), f"cliente-{customer}-{k}", "Hola, ¿y mi pedido?")
    run_turn(agent, ContextoCliente("C19"), "cliente-C19-1", "Prefiero que me atendáis en euskera.")


def seed_loop(db: Database, customer: str = CUSTOMER) -> int:
    """The seed article's erasure, as written: one search, one delete per item."""
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    n = 0
    for item in store.search(("clientes", customer), limit=1000):
        store.delete(item.namespace, item.key)
        n += 1
    return n


def seed_loop_until_empty(db: Database, customer: str = CUSTOMER) -> int:
    """The seed's loop repeated until its search comes back empty: the same store documents deleted
    as the complete erasure (still nothing for threads and logs)."""
    total = 0
    while n := seed_loop(db, customer):
        total += n
    return total


def remaining(db: Database) -> dict[str, int]:
    counts = {e.table: e.result for e in evidence.run_evidence(db, CUSTOMER, evidence.find_threads(db, CUSTOMER))}
    return {k: v for k, v in counts.items() if v}


def others_total(db: Database) -> int:
    return db.fetch_one(
        "SELECT count(*) AS n FROM store WHERE prefix <> %s AND prefix NOT LIKE %s",
        (f"clientes.{CUSTOMER}", f"clientes.{CUSTOMER}.%"),
    )["n"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2_500)
    parser.add_argument("--others", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-erasure-") as tmp:
        base = embedded_dsn(Path(tmp))
        template = f"bench_erasure_tpl_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{template}"')
        migrate(dsn_for(base, template), DIMS)
        tpl = Database(dsn_for(base, template))
        started = time.perf_counter()
        populate(tpl, args.docs, args.others)
        setup_s = time.perf_counter() - started
        before = evidence.preview(tpl, CUSTOMER).counts
        others_before = others_total(tpl)
        reset_pool(tpl.dsn)

        def copy() -> Database:
            name = f"bench_erasure_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
            return Database(dsn_for(base, name))

        def warm(db: Database, connections: int) -> Database:
            # open the pooled connections a contender uses and touch the store, outside the timings;
            # the seed's loop gets one (measured: it is slower, not faster, with two open)
            with ExitStack() as stack:
                for conn in [stack.enter_context(db.connection()) for _ in range(connections)]:
                    conn.execute("SELECT count(*) FROM store").fetchone()
            return db

        rows = []
        load_before = os.getloadavg()[0]
        for r in range(args.rounds):
            seed_db, full_db, ours_db = warm(copy(), 1), warm(copy(), 1), warm(copy(), 2)
            t0 = time.perf_counter()
            seed_n = seed_loop(seed_db)
            seed_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            full_n = seed_loop_until_empty(full_db)
            full_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            result = erasure.erase(ours_db, CUSTOMER, operator="bench")
            ours_s = time.perf_counter() - t0
            seed_left, full_left, ours_left = remaining(seed_db), remaining(full_db), remaining(ours_db)
            assert result.status == "complete" and not ours_left, (result.report, ours_left)
            for db in (seed_db, full_db, ours_db):
                assert others_total(db) == others_before
            rows.append(
                {
                    "round": r + 1,
                    "seed_s": seed_s,
                    "seed_deleted": seed_n,
                    "seed_left": seed_left,
                    "until_empty_s": full_s,
                    "until_empty_deleted": full_n,
                    "until_empty_left": full_left,
                    "erasure_s": ours_s,
                    "erasure_deleted_store": result.deleted["store"],
                    "erasure_left": ours_left,
                }
            )
            for db in (seed_db, full_db, ours_db):
                reset_pool(db.dsn)

    med = {k: statistics.median(r[k] for r in rows) for k in ("seed_s", "until_empty_s", "erasure_s")}
    summary = {
        "load_average_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "docs": args.docs,
        "other_customers": args.others,
        "rounds": args.rounds,
        "setup_s": round(setup_s, 2),
        "before": {k: v for k, v in before.items() if v},
        "seed_loop_median_s": round(med["seed_s"], 4),
        "seed_loop_deleted": rows[0]["seed_deleted"],
        "seed_loop_left_behind": rows[0]["seed_left"],
        "seed_until_empty_median_s": round(med["until_empty_s"], 4),
        "seed_until_empty_left_behind": rows[0]["until_empty_left"],
        "erasure_median_s": round(med["erasure_s"], 4),
        "erasure_left_behind": rows[0]["erasure_left"],
        "speedup_vs_seed_loop": round(med["seed_s"] / med["erasure_s"], 1),
        "speedup_vs_seed_until_empty": round(med["until_empty_s"] / med["erasure_s"], 1),
    }
    for r in rows:
        print(
            f"round {r['round']}: seed loop {r['seed_s']:.3f} s ({r['seed_deleted']} deleted, left behind "
            f"{r['seed_left']}); seed loop until empty {r['until_empty_s']:.3f} s ({r['until_empty_deleted']} "
            f"deleted, left behind {r['until_empty_left']}); erasure {r['erasure_s']:.3f} s "
            f"({r['erasure_deleted_store']} documents, left behind: {r['erasure_left'] or 'nothing'})"
        )
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
