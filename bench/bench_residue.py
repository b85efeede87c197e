"""Where one customer's erasure preview spends its time, step by step, on an existing database (read-only);
then, on a copy only, the Erasure page, the erasure itself and the sweep job after it.

    python -m bench.bench_residue --data /work/bench10m --dbname bench_prod_10000000_2500000_1000000_10000000_2500
    python -m bench.bench_residue --data /work/bench10m --dbname <a copy>_run --erase --sweep

Each step of `evidence.preview` on one connection: the subject resolver, the commonness of the customer's terms
(`core_value_holders`), the threads the token index names for the distinctive terms and for all terms (the
baseline: what the scan read before common terms stopped narrowing it), the residue scan, then the whole preview.
Without --erase and --sweep nothing is written; nothing depends on the time it runs. --erase renders the Erasure
page with Preview clicked (AppTest, as bench_production does), erases the customer and checks every evidence query
is 0; --sweep runs the sweep job (TTL sweep, retention, storage refresh, tool calls, token index, the erasure
register's re-check) once. Both refuse a database whose name does not end in `_run` (bench_production's copy).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import psycopg

from bench import bench_pages
from core.db import Database, embedded_dsn
from core.operations import sweep
from core.privacy import erasure, evidence, token_index
from core.privacy import residue as res
from core.privacy import subjects as subj


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return (time.perf_counter() - start) * 1000, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="the embedded server's folder")
    parser.add_argument("--dbname", required=True)
    parser.add_argument("--customer", default="C9")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--erase", action="store_true", help="then render the page, erase, check (a copy only)")
    parser.add_argument("--sweep", action="store_true", help="then run the sweep job once (a copy only)")
    args = parser.parse_args(argv)
    if (args.erase or args.sweep) and not args.dbname.endswith("_run"):
        raise SystemExit(f"{args.dbname} is not a copy (*_run): --erase and --sweep write")
    dsn = psycopg.conninfo.make_conninfo(embedded_dsn(args.data), dbname=args.dbname)
    db = Database(dsn)
    print(f"{args.dbname}, customer {args.customer}\n\n| step | ms | what |\n|---|---:|---|", flush=True)

    def row(step: str, ms: float, what: str) -> None:  # printed as measured: a later step may fail
        print(f"| {step} | {ms:,.1f} | {what} |", flush=True)

    with db.connection() as conn:
        ms, subjects = timed(lambda: subj.resolve_conn(conn, args.customer, subj.Attribution()))
        row("subject resolver", ms, f"{len(subjects.threads)} threads attributed")
        ms, terms = timed(lambda: res.customer_terms(conn, args.customer))
        row("customer_terms (commonness)", ms, f"{len(terms)} terms, {sum(t.common for t in terms)} common")
        distinctive = [t.term for t in terms if not t.common]
        ms, narrowed = timed(lambda: token_index.candidates(conn, distinctive))
        row("threads to read: distinctive terms", ms, narrowed.describe())
        ms, everything = timed(lambda: token_index.candidates(conn, [t.term for t in terms]))
        row("baseline: threads to read for every term", ms, everything.describe())
        ms, residue = timed(lambda: res.residue_conn(conn, args.customer, subjects.threads, terms))
        row(
            "residue scan (read, match, decode, count common terms)",
            ms,
            f"{residue.candidates} raw candidates, {len(residue.matches)} confirmed",
        )
        ms, _ = timed(lambda: res.residue_conn(conn, args.customer, subjects.threads, terms, count_common=False))
        row("residue scan as the erasure runs it (common terms not counted)", ms, "")
    for n in range(args.runs):
        ms, preview = timed(lambda: evidence.preview(db, args.customer))
        row(f"preview('{args.customer}') run {n + 1}", ms, f"{preview.total:,} rows to erase")
    ms, _ = timed(lambda: evidence.preview(db, args.customer, count_common=True))
    row(f"preview('{args.customer}', count_common=True): the page's button", ms, "")
    if args.erase:
        ms = bench_pages.page_render_ms(
            dsn, "app_pages/erasure.py", {"cliente": args.customer}, "erasure.preview", runs=args.runs, timeout=3600
        )
        row("Erasure page render with Preview clicked (AppTest, median)", ms, "")
        ms, result = timed(lambda: erasure.erase(db, args.customer, operator="bench"))
        nonzero = {e.table: e.result for e in result.evidence if e.result}
        row(
            f"erase('{args.customer}')",
            ms,
            f"status {result.status}; {result.deleted.get('store', 0):,} "
            f"documents; evidence queries not 0: {nonzero or 'none'}",
        )
    if args.sweep:
        ms, swept = timed(lambda: sweep.run_sweep(db, trigger="manual", operator="bench_residue"))
        row("sweep job (with the erasure register's re-check)", ms, swept.summary()[:300])
    db.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
