"""`core_prefix_counts` (trigger-maintained) equals a live GROUP BY over `store` after every
kind of write the system makes: puts, overwrites, TTL refreshes, batch deletes, sweeps."""

from __future__ import annotations

import time

from conftest import DIMS
from langgraph.store.base import PutOp

from core.capture.follower import catch_up
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store, get_memory, put_memory
from core.migrate import migrate

LIVE = "SELECT prefix, count(*) AS documents FROM store GROUP BY prefix ORDER BY prefix"
KEPT = "SELECT prefix, documents FROM core_prefix_counts ORDER BY prefix"


def assert_exact(db):
    catch_up(db.dsn)  # the change follower applies what was written (core/capture)
    assert db.fetch(KEPT) == db.fetch(LIVE)


def test_counts_follow_every_write(db):
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    for cid in ("C9", "C_9", "C%"):
        put_memory(store, ("clientes", cid), "pref-idioma", {"texto": "M"})
        put_memory(store, ("clientes", cid), "pref-contacto", {"texto": "SMS"})
    assert_exact(db)
    before = db.fetch_one("SELECT last_write FROM core_prefix_counts WHERE prefix='clientes.C9'")["last_write"]
    put_memory(store, ("clientes", "C9"), "pref-idioma", {"texto": "L"})  # overwrite: same count, newer write
    assert_exact(db)
    assert db.fetch_one("SELECT last_write FROM core_prefix_counts WHERE prefix='clientes.C9'")["last_write"] > before
    get_memory(store, ("clientes", "C9"), "pref-idioma")  # TTL refresh is an UPDATE
    assert_exact(db)
    store.batch(
        [
            PutOp(("clientes", "C9"), "pref-idioma", None),
            PutOp(("clientes", "C_9"), "pref-idioma", None),
            PutOp(("clientes", "C_9"), "pref-contacto", None),
        ]
    )
    assert_exact(db)
    assert db.fetch_one("SELECT count(*) AS n FROM core_prefix_counts WHERE prefix='clientes.C_9'")["n"] == 0
    put_memory(store, ("proveedores", "P1"), "aviso-promocion", {"texto": "flash"}, valid_for_minutes=0.005)
    time.sleep(0.5)
    assert store.sweep_ttl() == 1
    assert_exact(db)


def test_backfill_on_migration_of_an_existing_store(create_database):
    """A store that already has rows before our migration is counted from the start."""
    dsn = create_database(migrated=False)
    # The store as agents set it up before this dashboard existed: only langgraph's own setup.
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        store = build_store(conn, OfflineHashEmbeddings(DIMS), DIMS)
        store.setup()
        store.put(("clientes", "C1"), "pref-idioma", {"texto": "M"}, ttl=60)
        store.put(("empleados", "E1"), "ajuste-turno", {"texto": "tarde"}, ttl=60)
    migrate(dsn, DIMS)
    from core.db import Database

    assert_exact(Database(dsn))
