"""Production-sized memory data for the benchmarks, bulk-loaded with COPY.

Shape (at --docs 1_000_000): 80% `clientes` over --customers namespaces (0.5% of them above the
4-document closed schema), 10% `proveedores`, 10% `empleados`; ~8% of rows already expired;
vectors for --vector-share of the rows; one `core_memory_writes` row per customer document plus
overwrites, and `core_conversations` threads over the last 365 days. Values have the shape the
tools write. This is bulk data (COPY), not the agents' code path: the tests and the demo use that.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from datetime import UTC, datetime, timedelta

import psycopg

from core.memory.store import POLICIES, TIPOS

TTL = {root: p.ttl_minutes for root, p in POLICIES.items()}
# No generated document expires within this long after generation: a benchmark run that counts the
# expired documents and then sweeps them sees the same set (bench_production also moves such expiries
# out of each run's window when it copies a template built earlier).
RUN_WINDOW = timedelta(days=1)


def _copy(conn: psycopg.Connection, sql: str, rows) -> int:
    n = 0
    with conn.cursor() as cur, cur.copy(sql) as copy:
        for row in rows:
            copy.write_row(row)
            n += 1
    return n


def generate(
    dsn: str,
    docs: int,
    customers: int,
    vector_share: float = 0.1,
    dims: int = 64,
    seed: int = 11,
    threads: int | None = None,
) -> dict:
    """`threads`: rows of core_conversations (default docs // 10)."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    started = time.monotonic()
    n_cli = int(docs * 0.8)
    n_sup = int(docs * 0.1)
    n_emp = docs - n_cli - n_sup

    def store_rows():
        def row(prefix: str, key: str, value: dict, root: str):
            age = timedelta(minutes=rng.randint(0, 360 * 1440))
            created = now - age
            expires = created + timedelta(minutes=TTL[root])
            if rng.random() < 0.08:  # expired, not yet swept
                expires = now - timedelta(minutes=rng.randint(1, 20_000))
            elif now <= expires < now + RUN_WINDOW:  # would expire during the run: a day later instead
                expires += RUN_WINDOW
            return (prefix, key, json.dumps(value), created, created, expires, TTL[root])

        # clientes: spread docs over customers, max 4 each, plus oversized ones
        made = 0
        c = 0
        while made < n_cli:
            c += 1
            cid = f"C{c % customers + 1}-{c // customers}" if c > customers else f"C{c}"
            oversized = rng.random() < 0.005
            k = rng.randint(5, 9) if oversized else rng.randint(1, 4)
            keys = [f"pref-{t}" for t in TIPOS][: min(k, 4)] + [f"nota-{i}" for i in range(max(0, k - 4))]
            for key in keys[: n_cli - made]:
                yield row(f"clientes.{cid}", key, {"tipo": key[5:], "valor": "x", "texto": f"{key}: x"}, "clientes")
                made += 1
        for i in range(n_sup):
            yield row(
                f"proveedores.P{i % 5000}", f"aviso-{i // 5000}", {"tema": "retraso", "texto": "retraso"}, "proveedores"
            )
        for i in range(n_emp):
            yield row(
                f"empleados.E{i % 25000}",
                f"ajuste-{i // 25000}",
                {"ajuste": "turno", "valor": "x", "texto": "turno"},
                "empleados",
            )

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        with conn.transaction():
            n = _copy(
                conn,
                "COPY store (prefix, key, value, created_at, updated_at, expires_at, ttl_minutes) FROM STDIN",
                store_rows(),
            )
        vec = "[" + ",".join(["0.125"] * dims) + "]"
        conn.execute(
            "INSERT INTO store_vectors (prefix, key, field_name, embedding, created_at, updated_at) "
            "SELECT prefix, key, 'texto', %s::vector, created_at, updated_at FROM store WHERE random() < %s",
            (vec, vector_share),
        )
        threads = threads or max(1, docs // 10)

        def conv_rows():
            for t in range(threads):
                started_at = now - timedelta(minutes=rng.randint(0, 365 * 1440))
                yield (
                    f"cliente-bench-{t}",
                    "atencion-cliente",
                    "clientes",
                    f"C{t % customers + 1}",
                    started_at,
                    started_at,
                    1,
                )

        with conn.transaction():
            _copy(
                conn,
                "COPY core_conversations (thread_id, agent, subject_root, subject_id, started_at, "
                "last_turn_at, turns) FROM STDIN",
                conv_rows(),
            )
        conn.execute(
            "INSERT INTO core_memory_writes (prefix, key, thread_id, agent, written_at) "
            "SELECT s.prefix, s.key, 'cliente-bench-' || (abs(hashtext(s.prefix || s.key)) %% %s), "
            "'atencion-cliente', s.created_at "
            "FROM store s WHERE s.prefix LIKE 'clientes.%%' AND s.key LIKE 'pref-%%'",
            (threads,),
        )
        conn.execute("ANALYZE")
    return {"store_rows": n, "threads": threads, "seconds": round(time.monotonic() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--customers", type=int, default=250_000)
    args = parser.parse_args()
    print(generate(args.dsn, args.docs, args.customers))


if __name__ == "__main__":
    main()
