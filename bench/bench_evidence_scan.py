"""What taking our indexes off the agents' tables (issue 37, migrations 143-144) costs the DPO's zero-count evidence:
the erasure's queries on `store_vectors` and `checkpoints` (core/privacy/evidence.py, exactly as an erasure records
them) now read those tables whole. Baseline, in the same run on the same rows: the same queries with the dropped
indexes created again inside a transaction that is rolled back.

    python -m bench.bench_evidence_scan --rows 1000000

A migrated database on the embedded server; `--rows` checkpoints (checkpoint payloads from langgraph's own
`empty_checkpoint`, metadata as our agents write it: cliente_id, agente, source, step) and as many store documents
with one vector each (COPY). Prints the median of 5 runs per query, with and without the indexes. Deterministic:
ids are numbered, nothing depends on the time it runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import psycopg
from langgraph.checkpoint.base import empty_checkpoint

from bench.bench_capture import fresh_database, logical_server
from core.migrate import migrate
from core.privacy import evidence
from core.privacy.subjects import Attribution

DIMS = 8
DROPPED = (
    "CREATE INDEX core_checkpoints_cliente_idx ON checkpoints ((metadata ->> 'cliente_id'))",
    "CREATE INDEX core_checkpoints_customer_id_idx ON checkpoints ((metadata ->> 'customer_id')) "
    "WHERE metadata ? 'customer_id'",
    "CREATE INDEX core_checkpoints_user_id_idx ON checkpoints ((metadata ->> 'user_id')) WHERE metadata ? 'user_id'",
    "CREATE INDEX core_store_vectors_prefix_pattern_idx ON store_vectors (prefix text_pattern_ops, key)",
)


def fill(dsn: str, rows: int) -> None:
    checkpoint = empty_checkpoint()
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.cursor().copy(
            "COPY checkpoints (thread_id, checkpoint_ns, checkpoint_id, checkpoint, metadata) FROM STDIN"
        ) as copy:
            for n in range(rows):
                customer = f"C{n % 100_000}"
                checkpoint["id"] = f"1f0{n:029d}"
                checkpoint["ts"] = f"2026-11-{1 + n % 28:02d}T10:00:00+00:00"
                metadata = {"cliente_id": customer, "agente": "atencion-cliente", "source": "loop", "step": n % 9}
                copy.write_row(
                    (f"cliente-{customer}-{n % 7}", "", checkpoint["id"], json.dumps(checkpoint), json.dumps(metadata))
                )
        with conn.cursor().copy("COPY store (prefix, key, value) FROM STDIN") as copy:
            for n in range(rows):
                copy.write_row((f"clientes.C{n % 100_000}", f"pref-{n}", json.dumps({"valor": f"v{n}"})))
        vector = "[" + ",".join("0.1" for _ in range(DIMS)) + "]"
        with conn.cursor().copy("COPY store_vectors (prefix, key, field_name, embedding) FROM STDIN") as copy:
            for n in range(rows):
                copy.write_row((f"clientes.C{n % 100_000}", f"pref-{n}", "$", vector))
        conn.execute("VACUUM ANALYZE checkpoints, store, store_vectors")


def timed(conn: psycopg.Connection, sql: str, params: dict, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        conn.execute(sql, params).fetchall()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--data", type=Path, default=None)
    args = parser.parse_args()
    _data, base = logical_server(args.data, "bench-evidence-")
    dsn = fresh_database(base, "bench_evidence_scan")
    migrate(dsn, DIMS)
    start = time.monotonic()
    fill(dsn, args.rows)
    print(f"{args.rows:,} checkpoints, documents and vectors written in {time.monotonic() - start:.0f} s", flush=True)
    customer = "C4242"
    queries = {
        "checkpoints (threads, metadata keys)": (
            evidence.checkpoints_zero_sql(Attribution().metadata_keys),
            {"threads": [f"cliente-{customer}-1"], "cliente_id": customer},
        ),
        "store_vectors (namespace and below)": (
            evidence.VECTORS_ZERO_SQL,
            {"prefix": f"clientes.{customer}", "pattern": f"clientes.{customer}.%"},
        ),
    }
    with psycopg.connect(dsn, autocommit=True) as conn:
        without = {name: timed(conn, sql, p) for name, (sql, p) in queries.items()}
        with conn.transaction(force_rollback=True):
            for statement in DROPPED:
                conn.execute(statement)
            conn.execute("ANALYZE checkpoints, store_vectors")
            with_indexes = {name: timed(conn, sql, p) for name, (sql, p) in queries.items()}
    print(f"\n| evidence query ({args.rows:,} rows) | no index of ours (ms) | with the dropped indexes (ms) |")
    print("|---|---:|---:|")
    for name in queries:
        print(f"| {name} | {without[name]:,.1f} | {with_indexes[name]:,.1f} |")


if __name__ == "__main__":
    main()
