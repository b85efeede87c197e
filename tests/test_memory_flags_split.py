"""Issue 52: the Memory page's flags with the dashboard's database apart. A demo written by the real agents, sweeps
and erasures gives the flags in one database; the upgrade in place then moves what the dashboard keeps to its own
database, and every flag (counts per store, the listed rows, the unattributed writes), of every customer and of one
store's, is the same read apart: documents and the mapping streamed into temporary tables of ours, the checkpoints'
keys from the follower's shadow. Nothing is written in the agents' database by the read."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import psycopg
import pytest

from core.capture.follower import drop_slot
from core.config import Settings
from core.db import Database, forget_dashboard_database, use_dashboard_database
from core.memory import flags
from core.memory.customer_stores import StoreSources
from core.memory.store import put_memory
from core.own_database import move
from tests.conftest import DIMS, dsn_for, settings_for
from tests.test_memory_flags import RECOGIDA, Shop

pytestmark = pytest.mark.slow  # the demo seeded by the real agents

THRESHOLDS = flags.Thresholds(expiring_days=400, used_days=400, flapping_writes=2)


def same(a: flags.MemoryFlags, b: flags.MemoryFlags) -> None:
    pd.testing.assert_frame_equal(a.counts.reset_index(drop=True), b.counts.reset_index(drop=True))
    pd.testing.assert_frame_equal(a.rows.reset_index(drop=True), b.rows.reset_index(drop=True))
    assert a.unattributed_writes == b.unattributed_writes


def test_every_flag_reads_the_same_with_our_database_apart(create_database, pg_dsn):
    from core.demo.seed import ensure_demo

    agents = create_database(prefix="flags")
    db = Database(agents)
    settings = Settings(dsn=agents, embeddings_dims=DIMS, auto_migrate=False)
    with ThreadPoolExecutor(1) as pool:  # the seed's sync saver refuses a running event loop's thread
        assert pool.submit(ensure_demo, db, settings, customers=16).result() is not None
    shop = Shop(db)  # the retail agent, then a write of a wider namespace, as test_memory_flags makes each flag
    for n, tienda in enumerate(["Sierpes", "Goya", "Sol"]):  # flapping: one preference written three times
        shop.say("F1", f"cliente-F1-{n}", RECOGIDA.format(tienda))
    shop.say("K1", "cliente-K1-1", RECOGIDA.format("Sierpes"))
    put_memory(  # contradiction: a second document of the same tipo with another value
        shop.store,
        ("clientes", "K1", "web"),
        "pref-recogida",
        {"tipo": "recogida", "valor": "Goya", "texto": "recogida: Goya"},
        thread_id="web-K1",
        agent="web",
    )
    shop.settle()  # the extraction, the mapping (provenance gone: web-K1 was never a checkpoint thread)
    store = db.fetch_one("SELECT tienda FROM core_customer_stores WHERE effective GROUP BY 1 ORDER BY count(*) DESC")
    scope = StoreSources.from_settings(settings_for(agents)).scope((store["tienda"],))
    whole, scoped = flags.memory_flags(db, THRESHOLDS), flags.memory_flags(db, THRESHOLDS, scope=scope)
    assert all(whole.total(f) > 0 for f in flags.FLAGS), whole.counts
    assert sum(scoped.total(f) for f in flags.FLAGS) > 0, scoped.counts
    db.close()

    ours = dsn_for(pg_dsn, str(psycopg.conninfo.conninfo_to_dict(agents)["dbname"]) + "_ours")
    use_dashboard_database(agents, ours)
    try:
        move(agents, log=lambda _: None)
        apart = Database(agents)
        assert apart.ours is not apart
        with psycopg.connect(agents, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_force_next_flush()")
            before = conn.execute("SELECT sum(n_tup_ins + n_tup_upd + n_tup_del) FROM pg_stat_user_tables").fetchone()
        same(flags.memory_flags(apart, THRESHOLDS), whole)
        same(flags.memory_flags(apart, THRESHOLDS, scope=scope), scoped)
        with psycopg.connect(agents, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_force_next_flush()")
            after = conn.execute("SELECT sum(n_tup_ins + n_tup_upd + n_tup_del) FROM pg_stat_user_tables").fetchone()
        assert after == before  # the read wrote nothing in the agents' database (no temporary table there either)
        apart.ours.close()
        apart.close()
    finally:
        drop_slot(agents)
        forget_dashboard_database(agents)
