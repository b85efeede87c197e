"""How much WAL does the follower's recount write (issue 37, "the slot is lost during its own recount")? The slot
keeps every WAL byte from its creation until the follower has drained past it, so `max_slot_wal_keep_size` must
hold at least what the recount writes. For each size: a fresh database on an embedded PostgreSQL 18 (`wal_level =
logical`), `--sizes` documents from bench/generate_store.py (COPY, fixed seed), then `Follower.setup()` (slot,
recount) timed, with the WAL it wrote, against the store's size
(`pg_total_relation_size('store')`, its indexes and TOAST included): the baseline the ratio names. Deterministic:
numbered documents, fixed seed, a CHECKPOINT before the recount (full-page images counted the same each run).

    python -m bench.bench_recount_wal --sizes 200000 1000000

Issue 52: each size is measured twice, the baseline first: our tables in the agents' database (the layout before,
still the default), then the dashboard's own database on the same server (PG_DASHBOARD; its follower tables
UNLOGGED, core/sql/dashboard/001). The WAL is the server's, all databases' (what the agents' slot keeps), from
pg_current_wal_insert_lsn(); "own / before" is the ratio of the two.
"""

from __future__ import annotations

import argparse
import time

from bench.bench_capture import fresh_database, logical_server
from bench.generate_store import generate
from core.capture import follower
from core.db import use_dashboard_database
from core.migrate import migrate

DIMS = 64


def measure(dsn: str, size: int) -> dict[str, float]:
    migrate(dsn, DIMS)
    generate(dsn, size, size // 4, dims=DIMS)
    f = follower.Follower(dsn)
    with follower.open_links(dsn) as links:
        conn = links.primary
        # a settled database, every table of it vacuumed (hint bits and visibility map set: PostgreSQL 18's data
        # checksums log the first reader's hint bits, and an autovacuum of a freshly generated table during the
        # recount would log its visibility map, 100 MB at 1M), then a CHECKPOINT: full-page images counted the same
        # way each run
        conn.execute("VACUUM (FREEZE)")
        conn.execute("CHECKPOINT")
        store = conn.execute("SELECT pg_total_relation_size('store')").fetchone()[0]
        start = follower.lsn_int(conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0])
        t = time.monotonic()
        f.setup(links)
        seconds = time.monotonic() - t
        wal = follower.lsn_int(conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]) - start
        ours = links.ours.execute(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c WHERE c.relkind = 'r' AND c.relname IN "
            "('core_prefix_counts', 'core_root_counts', 'core_expiry_days', 'core_store_shadow', "
            "'core_value_holders', 'core_checkpoint_shadow', 'core_token_dirty')"
        ).fetchone()[0]
        follower.drop_slot(dsn, links)
    return {"store": store, "wal": wal, "ours": float(ours), "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200_000, 1_000_000])
    args = parser.parse_args()
    _data, base = logical_server(None, "bench-recount-wal-")
    print(
        "| documents | our tables in | store (MB) | recount WAL (MB) | WAL / store | own / before "
        "| our tables (MB) | recount (s) |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for size in args.sizes:
        before = measure(fresh_database(base, f"recount_{size}"), size)
        agents = fresh_database(base, f"recount_own_{size}")
        use_dashboard_database(agents, fresh_database(base, f"recount_own_{size}_dashboard"))
        own = measure(agents, size)
        for label, m in (("the agents' database", before), ("our own database (same server)", own)):
            print(
                f"| {size:,} | {label} | {m['store'] / 1e6:,.1f} | {m['wal'] / 1e6:,.2f} | {m['wal'] / m['store']:.3f} "
                f"| {m['wal'] / before['wal']:.3f} | {m['ours'] / 1e6:,.1f} | {m['seconds']:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
