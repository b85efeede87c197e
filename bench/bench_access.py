"""Benchmark: the access export of a customer with 2,500 documents and 20 threads (core.privacy.access.export,
gather + render + register row), against the langgraph public-API way of reading the same customer.

    python bench/bench_access.py                      # 2,500 docs, 20 threads, 5 rounds
    python bench/bench_access.py --docs 500 --threads 4 --rounds 2

Data, through the real code paths: the customer's documents are written with the store's own `batch` of
`PutOp`s with `index=["texto"]`, 20% in a nested namespace ("clientes", id, "pedidos"); `--threads`
conversations of two turns each by the real customer agent (scripted model, PostgresSaver) give checkpoint
threads, messages, tool calls and log rows; 500 other customers (look-alike ids included) hold 4 documents each.

Measured per round (median reported):
- export json / export html: `access.export(db, id, fmt=..., lang="es", operator="bench")` end to end: the
  threads, every document, every decoded message (SQL views), our logs and registers, one REPEATABLE READ
  snapshot, rendering, and the access-register row (sealed into the hash chain by its trigger);
- baseline "langgraph API": `store.search(("clientes", id), limit=1000, offset=...)` page by page until empty
  (which, with the agents' TTL config, also refreshes every document's TTL: one reason the export does not use
  it) plus `PostgresSaver.get_tuple` of each thread's latest checkpoint (its messages, deserialized in Python).
  It reads less than the export (no logs, no registers, no per-write order, no marking of refused payloads).
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
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from langgraph.checkpoint.postgres import PostgresSaver  # noqa: E402
from langgraph.store.base import PutOp  # noqa: E402

from agent_memory_runtime.serde import make_serializer  # noqa: E402
from core.agents.retail import ContextoCliente, build_agent, run_turn  # noqa: E402
from core.agents.scripted_model import ScriptedChatModel  # noqa: E402
from core.db import Database, embedded_dsn, reset_pool  # noqa: E402
from core.memory.embeddings import OfflineHashEmbeddings  # noqa: E402
from core.memory.store import build_store, ttl_for  # noqa: E402
from core.migrate import migrate  # noqa: E402
from core.privacy import access  # noqa: E402

DIMS = 64
CUSTOMER = "C9"
LOOK_ALIKES = ["C_9", "C19", "CA9", "C9x", "C%"]


def dsn_for(base: str, name: str) -> str:
    return psycopg.conninfo.make_conninfo(base, dbname=name)


def populate(db: Database, docs: int, threads: int, others: int) -> None:
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    ops = []
    for i in range(docs):
        ns = ("clientes", CUSTOMER, "pedidos") if i % 5 == 0 else ("clientes", CUSTOMER)
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
                    f"nota-{k}",
                    {"texto": f"nota {k} de {cid}"},
                    index=["texto"],
                    ttl=ttl_for(("clientes", cid)),
                )
            )
    for start in range(0, len(ops), 1000):
        store.batch(ops[start : start + 1000])
    agent = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(db.pool))
    for k in range(1, threads + 1):
        run_turn(
            agent,
            ContextoCliente(CUSTOMER),
            f"cliente-{CUSTOMER}-{k}",
            "Prefiero recoger mis pedidos en la tienda Sierpes.",
        )
        run_turn(agent, ContextoCliente(CUSTOMER), f"cliente-{CUSTOMER}-{k}", "Hola, ¿y mi pedido?")
    run_turn(agent, ContextoCliente("C19"), "cliente-C19-1", "Mi talla es la L.")


def baseline(db: Database, thread_ids: list[str]) -> tuple[int, int]:
    """The langgraph public-API read: store.search pages until empty + get_tuple per thread."""
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    documents, offset = 0, 0
    while items := store.search(("clientes", CUSTOMER), limit=1000, offset=offset):
        documents += len(items)
        offset += len(items)
    saver = PostgresSaver(db.pool, serde=make_serializer())
    messages = 0
    for thread_id in thread_ids:
        snapshot = saver.get_tuple({"configurable": {"thread_id": thread_id}})
        messages += len(snapshot.checkpoint["channel_values"].get("messages", [])) if snapshot else 0
    return documents, messages


def median_s(fn, rounds: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(rounds):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2_500)
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--others", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-access-") as tmp:
        base = embedded_dsn(Path(tmp))
        name = f"bench_access_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        migrate(dsn_for(base, name), DIMS)
        db = Database(dsn_for(base, name))
        t0 = time.perf_counter()
        populate(db, args.docs, args.threads, args.others)
        setup_s = time.perf_counter() - t0
        report = access.gather(db, CUSTOMER)
        counts = report.counts
        assert counts["threads"] == args.threads, counts
        assert counts["documents"] >= args.docs, counts
        threads = [t["thread_id"] for t in report.threads]
        load_before = os.getloadavg()[0]
        access.export(db, CUSTOMER, fmt="json", lang="es", operator="bench")  # warm the pool and the plans
        json_s, js = median_s(lambda: access.export(db, CUSTOMER, fmt="json", lang="es", operator="bench"), args.rounds)
        html_s, ht = median_s(lambda: access.export(db, CUSTOMER, fmt="html", lang="es", operator="bench"), args.rounds)
        gather_s, _ = median_s(lambda: access.gather(db, CUSTOMER), args.rounds)
        base_s, (base_docs, base_msgs) = median_s(lambda: baseline(db, threads), args.rounds)
        reset_pool(db.dsn)
    summary = {
        "load_average_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "docs": args.docs,
        "threads": args.threads,
        "other_customers": args.others,
        "rounds": args.rounds,
        "setup_s": round(setup_s, 1),
        "counts": counts,
        "export_json_median_s": round(json_s, 3),
        "export_json_bytes": len(js.data),
        "export_html_median_s": round(html_s, 3),
        "export_html_bytes": len(ht.data),
        "gather_median_s": round(gather_s, 3),
        "baseline_langgraph_api_median_s": round(base_s, 3),
        "baseline_read": {"documents": base_docs, "messages_in_latest_state": base_msgs},
        "target_s": 2.0,
        "target_met": max(json_s, html_s) < 2.0,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
