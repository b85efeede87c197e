"""Benchmark of the sweep job: a TTL sweep with 100k expired rows among 1M, and checkpoint retention
over 100k threads, each against a named baseline measured in the same run on an identical copy
of the data (CREATE DATABASE ... TEMPLATE).

    python bench/bench_sweep.py                       # 1M docs / 100k expired, 100k threads
    python bench/bench_sweep.py --docs 100000 --expired 10000 --threads 10000   # quick

Data (bulk, not the agents' code path; the tests use the real put path and real agents):
- store: COPY of `--docs` rows (80% clientes, 10% proveedores, 10% empleados, the tools' value
  shapes, the namespace TTL in ttl_minutes), exactly `--expired` of them already expired (spread over
  the three roots), and one `store_vectors` row per document (COPY; a constant 64-dim vector: its
  value does not matter to a DELETE). The HNSW index on store_vectors is dropped before the load
  and not rebuilt: a DELETE does not touch HNSW entries (VACUUM does), and building it for 1M rows
  would dominate the setup.
- checkpoints: 4 real threads written by the real agents (scripted model, PostgresSaver, the real
  serializer), then their `checkpoints` / `checkpoint_blobs` / `checkpoint_writes` rows replicated by
  COPY to `--threads` thread ids, with each copy's `checkpoint->>'ts'` moved back by its age;
  `--old-share` of the threads are older than the retention (120-400 days), the rest 0-60 days.

Baselines:
- TTL: the store's bare `sweep_ttl()` (what each replica's in-process sweeper runs per interval),
  and that same call on an already swept table (what the 2nd and 3rd replica's sweepers pay).
- retention: a set-based DELETE of the same threads, 500 per statement, in the three tables
  (what the job would cost without going through the checkpointer's `delete_thread`).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import langgraph.checkpoint.postgres  # noqa: E402,F401  (imported before any timing)

from core.memory import embeddings  # noqa: E402,F401
from core.operations import sweep  # noqa: E402

try:  # the job's erasure re-check hook imports it; import it before any timing too
    import core.privacy.erasure_register  # noqa: E402,F401
except ModuleNotFoundError:
    pass
from core.db import Database, embedded_dsn, reset_pool  # noqa: E402
from core.memory.store import POLICIES, TIPOS  # noqa: E402
from core.migrate import migrate  # noqa: E402

DIMS = 64
RETENTION_DAYS = 90
BATCH = 500


def dsn_for(base: str, name: str) -> str:
    return psycopg.conninfo.make_conninfo(base, dbname=name)


def create_db(base: str, name: str, template: str | None = None) -> str:
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    return dsn_for(base, name)


def copy_rows(conn: psycopg.Connection, sql: str, rows) -> int:
    n = 0
    with conn.cursor() as cur, cur.copy(sql) as copy:
        for row in rows:
            copy.write_row(row)
            n += 1
    return n


# --- store data ---------------------------------------------------------------------------------


def load_store(dsn: str, docs: int, expired: int, seed: int = 11) -> dict[str, int]:
    """COPY `docs` store rows (exactly `expired` expired) and one vector per row; returns expired per root."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    expired_idx = set(rng.sample(range(docs), expired))
    expired_by_root: dict[str, int] = {}
    shares = [("clientes", 0.8), ("proveedores", 0.1), ("empleados", 0.1)]
    bounds, acc = [], 0
    for root, share in shares:
        acc += int(docs * share)
        bounds.append((acc, root))
    bounds[-1] = (docs, bounds[-1][1])

    def root_of(i: int) -> str:
        return next(root for bound, root in bounds if i < bound)

    def doc(i: int) -> tuple[str, str, dict]:
        root = root_of(i)
        if root == "clientes":
            tipo = TIPOS[i % len(TIPOS)]
            return f"clientes.C{i // len(TIPOS)}", f"pref-{tipo}", {"tipo": tipo, "valor": "M", "texto": f"{tipo}: M"}
        if root == "proveedores":
            return f"proveedores.P{i % 20000}", f"aviso-{i}", {"tema": "retraso", "texto": "retraso de abrigos"}
        return f"empleados.E{i % 25000}", f"ajuste-{i}", {"ajuste": "turno", "valor": "tarde", "texto": "turno: tarde"}

    def store_rows():
        for i in range(docs):
            prefix, key, value = doc(i)
            root = prefix.split(".", 1)[0]
            ttl = POLICIES[root].ttl_minutes
            created = now - timedelta(minutes=rng.randint(0, ttl - 1))
            if i in expired_idx:
                expires = now - timedelta(minutes=rng.randint(1, 20_000))
                expired_by_root[root] = expired_by_root.get(root, 0) + 1
            else:
                expires = created + timedelta(minutes=ttl)
                if expires <= now + timedelta(minutes=10):
                    expires = now + timedelta(days=1)
            yield prefix, key, json.dumps(value), created, created, expires, ttl

    vector = "[" + ",".join(["0.125"] * DIMS) + "]"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        conn.execute("DROP INDEX IF EXISTS store_vectors_embedding_idx")
        with conn.transaction():
            copy_rows(
                conn,
                "COPY store (prefix, key, value, created_at, updated_at, expires_at, ttl_minutes) FROM STDIN",
                store_rows(),
            )
            copy_rows(
                conn,
                "COPY store_vectors (prefix, key, field_name, embedding, created_at, updated_at) FROM STDIN",
                ((*doc(i)[:2], "texto", vector, now, now) for i in range(docs)),
            )
        conn.execute("VACUUM ANALYZE store")
        conn.execute("VACUUM ANALYZE store_vectors")
    return expired_by_root


# --- checkpoint data ----------------------------------------------------------------------------


def seed_threads(dsn: str) -> dict[str, dict[str, list[dict]]]:
    """Four real threads written by the real agents; returns their rows per table."""
    from langgraph.checkpoint.postgres import PostgresSaver

    from core.agents.retail import ContextoCliente, ContextoEmpleado, ContextoProveedor, build_agent, run_turn
    from core.agents.scripted_model import ScriptedChatModel
    from core.memory.embeddings import OfflineHashEmbeddings
    from core.memory.store import build_store

    db = Database(dsn)
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    saver, model = PostgresSaver(db.pool), ScriptedChatModel()
    agents = {
        k: build_agent(k, model, store=store, checkpointer=saver)
        for k in ("atencion-cliente", "compras", "ajustes-personal")
    }
    run_turn(agents["atencion-cliente"], ContextoCliente("C1"), "seed-0", "Prefiero que me atendáis en catalán.")
    run_turn(agents["atencion-cliente"], ContextoCliente("C1"), "seed-0", "Gracias, eso es todo.")
    run_turn(agents["atencion-cliente"], ContextoCliente("C2"), "seed-1", "¿Puedo cambiar una prenda sin ticket?")
    run_turn(agents["compras"], ContextoProveedor("P1"), "seed-2", "aviso retraso: Los vaqueros llegan tarde")
    run_turn(agents["ajustes-personal"], ContextoEmpleado("E1"), "seed-3", "ajuste turno = tarde")
    out: dict[str, dict[str, list[dict]]] = {}
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
            for row in conn.execute(f"SELECT * FROM {table} WHERE thread_id LIKE 'seed-%%'").fetchall():
                out.setdefault(row["thread_id"], {}).setdefault(table, []).append(row)
        for table in (
            "checkpoints",
            "checkpoint_blobs",
            "checkpoint_writes",
            "store",
            "store_vectors",
            "core_conversations",
            "core_memory_writes",
        ):
            conn.execute(f"DELETE FROM {table}")
    reset_pool(dsn)
    return out


def load_threads(dsn: str, seeds: dict, threads: int, old_share: float, seed: int = 13) -> list[str]:
    """COPY `threads` copies of the seed threads; returns the ids of the old ones (oldest first)."""
    rng = random.Random(seed)
    patterns = [seeds[k] for k in sorted(seeds)]
    ages: list[tuple[str, float]] = []
    for i in range(threads):
        old = rng.random() < old_share
        days = rng.uniform(120, 400) if old else rng.uniform(0, 60)
        ages.append((f"bench-{i}", days))

    def rows(table: str, columns: list[str]):
        for i, (thread_id, days) in enumerate(ages):
            for row in patterns[i % len(patterns)].get(table, []):
                row = {**row, "thread_id": thread_id}
                if table == "checkpoints":
                    ckpt = dict(row["checkpoint"])
                    ts = datetime.fromisoformat(ckpt["ts"]) - timedelta(days=days)
                    ckpt["ts"] = ts.isoformat()
                    row["checkpoint"], row["metadata"] = json.dumps(ckpt), json.dumps(row["metadata"])
                yield tuple(row[c] for c in columns)

    columns = {
        "checkpoints": [
            "thread_id",
            "checkpoint_ns",
            "checkpoint_id",
            "parent_checkpoint_id",
            "type",
            "checkpoint",
            "metadata",
        ],
        "checkpoint_blobs": ["thread_id", "checkpoint_ns", "channel", "version", "type", "blob"],
        "checkpoint_writes": [
            "thread_id",
            "checkpoint_ns",
            "checkpoint_id",
            "task_id",
            "idx",
            "channel",
            "type",
            "blob",
            "task_path",
        ],
    }
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        with conn.transaction():
            for table, cols in columns.items():
                copy_rows(conn, f"COPY {table} ({', '.join(cols)}) FROM STDIN", rows(table, cols))
        for table in columns:
            conn.execute(f"VACUUM ANALYZE {table}")
    now_days = sorted(((d, t) for t, d in ages if d > RETENTION_DAYS), reverse=True)
    return [t for _, t in now_days]


def count_threads(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(DISTINCT thread_id) FROM checkpoints").fetchone()[0]


# --- runs ---------------------------------------------------------------------------------------


def timed(fn):
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def bare_sweep_ttl(dsn: str) -> int:
    from core.memory.embeddings import OfflineHashEmbeddings
    from core.memory.store import build_store

    with psycopg.connect(dsn, autocommit=True) as conn:
        return build_store(conn, OfflineHashEmbeddings(DIMS), DIMS).sweep_ttl()


def set_based_delete(dsn: str, thread_ids: list[str]) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for start in range(0, len(thread_ids), BATCH):
            batch = thread_ids[start : start + BATCH]
            with conn.transaction():
                for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
                    conn.execute(f"DELETE FROM {table} WHERE thread_id = ANY(%s)", (batch,))
    return len(thread_ids)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--expired", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=100_000)
    parser.add_argument("--old-share", type=float, default=0.5)
    parser.add_argument("--skip-store", action="store_true")
    parser.add_argument("--skip-retention", action="store_true")
    args = parser.parse_args(argv)
    base = embedded_dsn(Path(tempfile.mkdtemp(prefix="bench-sweep-")))
    print(f"embedded PostgreSQL at {base.split('?')[0]}; python {sys.version.split()[0]}")

    if not args.skip_store:
        tpl = create_db(base, "bench_store_tpl")
        migrate(tpl, DIMS)
        t_load, expected = timed(lambda: load_store(tpl, args.docs, args.expired))
        print(
            f"\n## TTL sweep: {args.docs:,} documents, {args.expired:,} expired, one vector each "
            f"(loaded by COPY in {t_load:.1f} s); expired per root {expected}"
        )
        job_dsn = create_db(base, "bench_store_job", "bench_store_tpl")
        base_dsn = create_db(base, "bench_store_base", "bench_store_tpl")
        t_base, n_base = timed(lambda: bare_sweep_ttl(base_dsn))
        t_empty, n_empty = timed(lambda: bare_sweep_ttl(base_dsn))
        job_db = Database(job_dsn)
        t_job, result = timed(lambda: sweep.run_sweep(job_db, trigger="manual", retention_days=3650))
        assert result.status == "ok", result.error
        assert n_base == result.documents_deleted == args.expired and n_empty == 0
        assert result.vectors_deleted == args.expired and result.deleted_by_root == expected
        t_job_empty, again = timed(lambda: sweep.run_sweep(job_db, trigger="manual", retention_days=3650))
        assert again.documents_deleted == 0
        print("| run | seconds | deleted | ratio to baseline |\n|---|---:|---:|---:|")
        print(
            f"| baseline: bare `store.sweep_ttl()` (one replica's in-process sweeper) | {t_base:.2f} | "
            f"{n_base:,} | 1.00 |"
        )
        print(
            f"| `core.sweep` job: lock + exact per-root/vector counts + `sweep_ttl()` + log | {t_job:.2f} | "
            f"{result.documents_deleted:,} docs, {result.vectors_deleted:,} vectors | {t_job / t_base:.2f} |"
        )
        print(
            f"| baseline: bare `sweep_ttl()` with nothing expired (each extra replica, each interval) | "
            f"{t_empty:.3f} | 0 | {t_empty / t_base:.3f} |"
        )
        print(f"| `core.sweep` job with nothing expired | {t_job_empty:.3f} | 0 | {t_job_empty / t_base:.3f} |")
        reset_pool(job_dsn)

    if not args.skip_retention:
        tpl = create_db(base, "bench_ckpt_tpl")
        migrate(tpl, DIMS)
        seeds = seed_threads(tpl)
        rows_per = {t: {k: len(v) for k, v in tables.items()} for t, tables in seeds.items()}
        t_load, old = timed(lambda: load_threads(tpl, seeds, args.threads, args.old_share))
        print(
            f"\n## Checkpoint retention: {args.threads:,} threads, {len(old):,} older than {RETENTION_DAYS} days "
            f"(COPY of real serialized rows in {t_load:.1f} s; rows per seed thread {rows_per})"
        )
        job_dsn = create_db(base, "bench_ckpt_job", "bench_ckpt_tpl")
        base_dsn = create_db(base, "bench_ckpt_base", "bench_ckpt_tpl")
        job_db = Database(job_dsn)
        t_dry, dry = timed(
            lambda: sweep.run_sweep(job_db, trigger="manual", retention_days=RETENTION_DAYS, dry_run=True)
        )
        assert sorted(dry.threads) == sorted(old), "dry run must list exactly the old threads"
        t_job, result = timed(lambda: sweep.run_sweep(job_db, trigger="manual", retention_days=RETENTION_DAYS))
        assert result.status == "ok", result.error
        assert result.threads_deleted == len(old) and count_threads(job_dsn) == args.threads - len(old)
        t_list, listed = timed(lambda: sweep.find_old_threads(Database(base_dsn), RETENTION_DAYS))
        t_base, _ = timed(lambda: set_based_delete(base_dsn, list(listed["thread_id"])))
        assert count_threads(base_dsn) == args.threads - len(old)
        t_base_total = t_list + t_base
        print("| run | seconds | threads | ratio to baseline |\n|---|---:|---:|---:|")
        print(
            f"| baseline: list + set-based DELETE, {BATCH} threads per statement | {t_base_total:.2f} | "
            f"{len(old):,} | 1.00 |"
        )
        print(
            f"| `core.sweep` job: list + re-check + `PostgresSaver.delete_thread` per thread + log | {t_job:.2f} | "
            f"{result.threads_deleted:,} | {t_job / t_base_total:.2f} |"
        )
        print(
            f"| `core.sweep --dry-run` (list only) | {t_dry:.2f} | {len(dry.threads):,} | {t_dry / t_base_total:.2f} |"
        )
        print(
            f"| per thread: job {1000 * t_job / max(1, len(old)):.2f} ms, baseline "
            f"{1000 * t_base_total / max(1, len(old)):.2f} ms | | | |"
        )
        reset_pool(job_dsn)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
