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
from foreign_agents import CUSTOMERS, Conversation, run_conversations, thread_id_for, write_article_agents

from core.capture.follower import drop_slot
from core.config import Settings
from core.db import Database, forget_dashboard_database, use_dashboard_database
from core.history import tool_calls
from core.memory import customer_stores, flags
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
    same_apart(agents, pg_dsn, whole, scoped, scope)


def same_apart(agents: str, pg_dsn: str, whole: flags.MemoryFlags, scoped: flags.MemoryFlags | None, scope) -> None:
    """Move what the dashboard keeps to a database of its own (the upgrade in place), then read every flag again:
    the same as `whole` (and `scoped` for `scope`), and nothing written in the agents' database by the read."""
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
        if scoped is not None:
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


def test_every_flag_reads_the_same_apart_on_a_database_the_articles_agents_wrote(create_database, pg_dsn):
    """The same on agents we did not write: the memory article's agents (stock PostgresStore and PostgresSaver, the
    customer id only in the runtime context), one of whose customers declares a pickup store three times: its
    documents are flagged expiring (the article's TTL), the writes unattributed (no thread names the customer)."""
    agents = create_database(prefix="flagsart")
    write_article_agents(agents)
    tiendas = ("Sierpes", "Goya", "Sol")
    run_conversations(
        agents,
        [Conversation(thread_id_for(f"flap-{t}"), CUSTOMERS[0], "write", "recogida", f"tienda {t}") for t in tiendas],
    )
    db = Database(agents)
    tool_calls.extract(db)  # what the sweep job does before the page reads
    assert not customer_stores.refresh(db, settings_for(agents)).errors
    whole = flags.memory_flags(db, THRESHOLDS)
    assert whole.total("expiring") > 0 and whole.unattributed_writes > 0, whole
    db.close()
    same_apart(agents, pg_dsn, whole, None, None)
