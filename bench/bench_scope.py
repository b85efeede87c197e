"""A store manager's scoped reads (issue 39) on the production-sized database, 100 stores.

    python -m bench.bench_scope                  # 1M documents / 250k customers / 100k threads / 1M writes, 100 stores
    python -m bench.bench_scope --smoke          # tiny sizes, seconds

Data: bench/bench_production.py's database (its template is built once in --data and copied per run: `store` by
COPY, checkpoints from the real agents' rows with langgraph's serializer, tool calls extracted), plus the
application's own table of customers `app_clientes(cliente_id, tienda)`: every customer namespace and every customer
of the extracted conversations, each in one of --stores stores by a hash of its id, one in a hundred in a second store.
The mapping is computed by the real refresh (`core.memory.customer_stores.refresh`, CUSTOMER_STORE_QUERY on that table
first, then checkpoint metadata and documents), timed as the sweep step it is: the first one (every row new) and the
next one (nothing changed).

Measured: every scoped read of the Memory and Preferences pages (core functions, median of --runs warm calls) for one
store, for ten stores (a regional manager), each against its baseline in the same run: the same function unscoped
(the whole chain, what every manager read before). Target: every scoped read under 300 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import bench_production as bp  # noqa: E402
from core.config import Settings  # noqa: E402
from core.db import Database, embedded_dsn, reset_pool  # noqa: E402
from core.memory import customer_stores, preferences, reads, semantic  # noqa: E402
from core.memory.customer_stores import StoreSources  # noqa: E402

TARGET_MS = 300.0
SMOKE = {**{name: bp.SMOKE[name] for name in bp.DATABASE_SIZES}, "runs": 1}
QUERY = "SELECT cliente_id, tienda FROM app_clientes"
# The application's own table: each customer in one store by a hash of its id, 1 in 100 in a second one.
# Its customers: those the dashboard counts, read in the dashboard's own database (CUSTOMERS), passed as an array.
CUSTOMERS = """
SELECT split_part(prefix, '.', 2) AS cliente_id FROM core_prefix_counts WHERE root = 'clientes'
UNION SELECT cliente_id FROM core_thread_last WHERE cliente_id IS NOT NULL"""
APP_TABLE = (
    "DROP TABLE IF EXISTS app_clientes",
    "CREATE TABLE app_clientes (cliente_id text NOT NULL, tienda text NOT NULL, PRIMARY KEY (cliente_id, tienda))",
    """
WITH c AS (SELECT unnest(%(customers)s::text[]) AS cliente_id)
INSERT INTO app_clientes
SELECT cliente_id, 'T' || lpad((abs(hashtext(cliente_id)) %% %(stores)s + 1)::text, 3, '0') FROM c
UNION
SELECT cliente_id, 'T' || lpad(((abs(hashtext(cliente_id)) + 1) %% %(stores)s + 1)::text, 3, '0') FROM c
WHERE abs(hashtext(cliente_id || '#')) %% 100 = 0""",
    "ANALYZE app_clientes",
)


def write_app_table(db: Database, stores: int) -> None:
    """The application's table in the agents' database, for the customers the dashboard counts in its own."""
    customers = [r["cliente_id"] for r in db.ours.fetch(CUSTOMERS)]
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        for statement in APP_TABLE:
            conn.execute(statement, {"stores": stores, "customers": customers} if "%(" in statement else None)


def median_ms(fn: Callable[[], Any], runs: int) -> float:
    fn()  # warm
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def run(base: str, sizes: dict[str, int], stores: int, log: Callable[[str], None]) -> tuple[list[tuple], dict]:
    dsn, info = bp.database(base, **{n: sizes[n] for n in bp.DATABASE_SIZES}, log=log, touch_template=False)
    db = Database(dsn)
    write_app_table(db, stores)
    settings = Settings(dsn=dsn, embeddings_dims=bp.DIMS, customer_store_query=QUERY)
    t = time.perf_counter()
    refreshed = customer_stores.refresh(db, settings, trigger="manual")
    info["refresh_ms"] = round((time.perf_counter() - t) * 1000)
    info["refresh"] = {
        "customers": refreshed.customers,
        "with_store": refreshed.with_store,
        "without_store": refreshed.without_store,
        "sources": {s.source: {"customers": s.customers, "pairs": s.pairs, "ms": s.ms} for s in refreshed.sources},
    }
    assert not refreshed.errors, refreshed.errors
    t = time.perf_counter()  # the next sweep's step: nothing changed since
    customer_stores.refresh(db, settings, trigger="manual")
    info["refresh_again_ms"] = round((time.perf_counter() - t) * 1000)
    log(f"mapping refreshed in {info['refresh_ms']} ms, again in {info['refresh_again_ms']} ms: {info['refresh']}")
    sources = StoreSources.from_settings(settings)
    one = sources.scope(("T042",))
    ten = sources.scope(tuple(f"T{n:03d}" for n in range(1, 11)))
    info["customers_one_store"] = customer_stores.scope_customers(db, one)
    info["customers_ten_stores"] = customer_stores.scope_customers(db, ten)
    mine = db.ours.fetch_one(  # the mapping and the counts are the dashboard's
        "SELECT m.cliente_id FROM core_customer_stores m JOIN core_prefix_counts c ON c.prefix = 'clientes.' || "
        "m.cliente_id WHERE m.effective AND m.tienda = 'T042' ORDER BY c.documents DESC, 1 LIMIT 1"
    )
    cid = mine["cliente_id"] if mine else "C1"
    other = db.ours.fetch_one(
        "SELECT cliente_id FROM core_customer_stores WHERE effective AND tienda = 'T043' AND cliente_id NOT IN "
        "(SELECT cliente_id FROM core_customer_stores WHERE effective AND tienda = 'T042') ORDER BY 1 LIMIT 1"
    )
    until = date.today()
    since = until - timedelta(days=29)
    reads_: dict[str, Callable[[Any], Any]] = {
        "memory_totals": lambda s: reads.memory_totals(db, scope=s),
        "documents_by_root": lambda s: reads.documents_by_root(db, scope=s),
        "top_prefixes(20)": lambda s: reads.top_prefixes(db, 20, scope=s),
        "oversized_customers": lambda s: reads.oversized_customers(db, scope=s),
        f"find_namespaces({cid})": lambda s: reads.find_namespaces(db, cid, scope=s),
        "find_namespaces(another store's customer)": lambda s: reads.find_namespaces(
            db, other["cliente_id"] if other else "C2", scope=s
        ),
        "suggest_namespaces('C1')": lambda s: reads.suggest_namespaces(db, "C1", scope=s),
        f"namespace_items(clientes.{cid})": lambda s: reads.namespace_items(db, f"clientes.{cid}", 50, scope=s),
        "semantic.search(k=10)": lambda s: semantic.search(db, settings, "prefiero WhatsApp", "clientes", 10, scope=s),
        "preference_daily(30 d)": lambda s: preferences.preference_daily(db, since, until, scope=s),
        "conversations(30 d)": lambda s: preferences.conversations(db, since, until, scope=s),
        "clocks(30 d)": lambda s: preferences.clocks(db, since, until, scope=s),
        "preference_by_tipo(30 d)": lambda s: preferences.preference_by_tipo(db, since, until, scope=s),
        "writing_conversations(30 d, 50)": lambda s: preferences.writing_conversations(db, since, until, 50, scope=s),
        "writing_conversation_count(30 d)": lambda s: preferences.writing_conversation_count(db, since, until, scope=s),
        "preferences_applied(500, 30 d)": lambda s: preferences.preferences_applied(db, 500, since, until, scope=s),
    }
    figures: list[tuple] = []
    for name, fn in reads_.items():
        chain = median_ms(lambda fn=fn: fn(None), sizes["runs"])
        for label, scope in (("1 store", one), ("10 stores", ten)):
            ms = median_ms(lambda fn=fn, scope=scope: fn(scope), sizes["runs"])
            figures.append((name, label, ms, chain))
            log(f"{name} [{label}]: {ms:.1f} ms (whole chain {chain:.1f} ms)")
    for label, scope in (("1 store", one), ("10 stores", ten)):
        figures.append(
            ("scope_customers", label, median_ms(lambda s=scope: customer_stores.scope_customers(db, s), 5), None)
        )
    figures.append(
        ("mapping_status", "-", median_ms(lambda: customer_stores.mapping_status(db, sources.names()), 5), None)
    )
    info["rows"] = bp.counts(db)
    db.close()
    reset_pool(dsn)
    return figures, info


def table(figures: list[tuple], command: str) -> str:
    lines = [
        f"Command: `{command}`",
        "",
        "| read | scope | ms (median) | baseline: whole chain, unscoped (ms) | ratio | < 300 ms |",
        "|---|---|---:|---:|---:|---|",
    ]
    for name, label, ms, chain in figures:
        ratio = f"{chain / ms:.2f}x" if chain and ms else "-"
        base = f"{chain:,.1f}" if chain is not None else "-"
        lines.append(f"| {name} | {label} | {ms:,.1f} | {base} | {ratio} | {'yes' if ms < TARGET_MS else 'NO'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    bp.add_database_arguments(parser)  # bench_production's database: its sizes, --data, --smoke
    parser.add_argument("--stores", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5, help="warm calls per read (median)")
    args = parser.parse_args(argv)
    sizes = bp.database_sizes(args) | {"runs": SMOKE["runs"] if args.smoke else args.runs}
    args.data.mkdir(parents=True, exist_ok=True)
    base = embedded_dsn(args.data)
    print(f"embedded PostgreSQL in {args.data}; load {os.getloadavg()}", flush=True)
    figures, info = run(base, sizes, args.stores, lambda s: print(s, flush=True))
    info["load_after"] = os.getloadavg()
    print(info)
    command = "python -m bench.bench_scope " + " ".join(argv if argv is not None else sys.argv[1:])
    print("\n" + table(figures, command.strip()))
    over = [f"{n} [{s}]" for n, s, ms, _ in figures if ms >= TARGET_MS]
    print(f"\n{len(figures)} figures; over {TARGET_MS:.0f} ms: " + (", ".join(over) or "none"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
