"""A customer's memory history and the flags' counts (issue 56) on the production-sized database.

    python -m bench.bench_memory_history               # 1M documents / 250k customers / 100k threads / 1M writes
    python -m bench.bench_memory_history --smoke       # tiny sizes, seconds

Data: bench/bench_production.py's database (its template built once in --data, copied per run), with bench_scope's
application table of customers and stores (100 stores) and the mapping refreshed by the real refresh.

Measured (core functions the Memory page calls, median of --runs warm calls):
- `history.customer_history` of the largest customer of store T042 (the one bench_scope opens), of `C9` (2,500
  documents, 3 conversations of the real agent) and of a customer of the extracted conversations (tool calls and
  our write log), each against its baseline in the same run: `reads.namespace_items` of the same customer (the
  documents table the same page already shows);
- `history.value_at` of one of that customer's documents, same baseline;
- `flags.memory_flags` for one store, ten stores and unscoped (every store), each against its baseline in the same
  run: `reads.oversized_customers` with the same scope (the page's other per-customer alarm).
Target: under 300 ms each. Ratio = baseline ms / ms (above 1: faster than the baseline).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import bench_production as bp  # noqa: E402
from bench import bench_scope  # noqa: E402
from core.config import Settings  # noqa: E402
from core.db import Database, embedded_dsn, reset_pool  # noqa: E402
from core.memory import customer_stores, flags, history, reads  # noqa: E402
from core.memory.customer_stores import StoreSources  # noqa: E402

TARGET_MS = 300.0
SMOKE = {**{name: bp.SMOKE[name] for name in bp.DATABASE_SIZES}, "runs": 1}

# A customer of the extracted conversations (not one of the two large ones): the most recorded preference writes.
SELECT_WRITER = """
SELECT cliente_id FROM core_tool_calls WHERE tool = 'recordar_preferencia' AND cliente_id IS NOT NULL
  AND cliente_id NOT IN ('C8', 'C9')
GROUP BY cliente_id ORDER BY count(*) DESC, cliente_id LIMIT 1"""


def run(base: str, sizes: dict[str, int], stores: int, log: Callable[[str], None]) -> tuple[list[tuple], dict]:
    dsn, info = bp.database(base, **{n: sizes[n] for n in bp.DATABASE_SIZES}, log=log, touch_template=False)
    db = Database(dsn)
    bench_scope.write_app_table(db, stores)
    settings = Settings(dsn=dsn, embeddings_dims=bp.DIMS, customer_store_query=bench_scope.QUERY)
    refreshed = customer_stores.refresh(db, settings, trigger="manual")
    assert not refreshed.errors, refreshed.errors
    sources = StoreSources.from_settings(settings)
    one_store = sources.scope(("T042",))
    ten = sources.scope(tuple(f"T{n:03d}" for n in range(1, 11)))
    mine = db.ours.fetch_one(  # the mapping, the counts and the tool calls are the dashboard's
        "SELECT m.cliente_id FROM core_customer_stores m JOIN core_prefix_counts c ON c.prefix = 'clientes.' || "
        "m.cliente_id WHERE m.effective AND m.tienda = 'T042' ORDER BY c.documents DESC, 1 LIMIT 1"
    )
    writer = db.ours.fetch_one(SELECT_WRITER)
    customers = {
        "T042's largest": mine["cliente_id"] if mine else "C1",
        "C9 (2,500 documents)": "C9",
        "most preference writes": writer["cliente_id"] if writer else "C1",
    }
    runs = sizes["runs"]
    figures: list[tuple] = []
    for label, cid in customers.items():
        found = history.customer_history(db, cid)
        assert found is not None
        info[f"history {label}"] = {"customer": cid, "documents": len(found.documents), "writes": len(found.writes)}
        baseline = bench_scope.median_ms(lambda cid=cid: reads.namespace_items(db, f"clientes.{cid}", 50), runs)
        ms = bench_scope.median_ms(lambda cid=cid: history.customer_history(db, cid), runs)
        figures.append((f"customer_history({cid}) [{label}]", ms, "namespace_items(50)", baseline))
        log(f"customer_history {label} {cid}: {ms:.1f} ms, baseline {baseline:.1f} ms; {info[f'history {label}']}")
        if label == "T042's largest":  # a store manager's read of their own customer
            scoped = bench_scope.median_ms(lambda cid=cid: history.customer_history(db, cid, scope=one_store), runs)
            figures.append((f"customer_history({cid}, scope T042) [{label}]", scoped, "namespace_items(50)", baseline))
        if found.writes:
            w = found.writes[-1]
            at = datetime.now(UTC)
            ms = bench_scope.median_ms(lambda w=w, at=at: history.value_at(db, w.prefix, w.key, at), runs)
            figures.append((f"value_at({w.prefix}, {w.key}) [{label}]", ms, "namespace_items(50)", baseline))
    thresholds = flags.Thresholds()
    for label, scope in (("1 store", one_store), ("10 stores", ten), ("every store", None)):
        found_flags = flags.memory_flags(db, thresholds, scope=scope)
        info[f"flags {label}"] = {f: found_flags.total(f) for f in flags.FLAGS} | {
            "unattributed_writes": found_flags.unattributed_writes
        }
        baseline = bench_scope.median_ms(lambda scope=scope: reads.oversized_customers(db, scope=scope), runs)
        ms = bench_scope.median_ms(lambda scope=scope: flags.memory_flags(db, thresholds, scope=scope), runs)
        figures.append((f"memory_flags [{label}]", ms, "oversized_customers (same scope)", baseline))
        log(f"memory_flags {label}: {ms:.1f} ms, baseline {baseline:.1f} ms; {info[f'flags {label}']}")
    info["rows"] = bp.counts(db)
    db.close()
    reset_pool(dsn)
    return figures, info


def table(figures: list[tuple], command: str) -> str:
    lines = [
        f"Command: `{command}`",
        "",
        "| read | ms (median) | baseline (same run) | baseline ms | ratio | < 300 ms |",
        "|---|---:|---|---:|---:|---|",
    ]
    for name, ms, base_name, base in figures:
        ratio = f"{base / ms:.2f}x" if ms else "-"
        lines.append(
            f"| {name} | {ms:,.1f} | {base_name} | {base:,.1f} | {ratio} | {'yes' if ms < TARGET_MS else 'NO'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    bp.add_database_arguments(parser)
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
    command = "python -m bench.bench_memory_history " + " ".join(argv if argv is not None else sys.argv[1:])
    print("\n" + table(figures, command.strip()))
    over = [name for name, ms, _, _ in figures if ms >= TARGET_MS]
    print(f"\n{len(figures)} figures; over {TARGET_MS:.0f} ms: " + (", ".join(over) or "none"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
