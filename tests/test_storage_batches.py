"""Issue 14: the sweep's per-thread storage refresh and attribution coverage run in batches of thread_id ranges
(bounded temp space at any size) with exactly the results of the single whole-table statements they replace,
kept here as the reference; the Storage view's table totals are the refresh's counts "as of" its time.
Real embedded PostgreSQL; checkpoints written by the real agents (ours and the article's, on stock savers)."""

from __future__ import annotations

import psycopg
import pytest
from apptools import as_int, metric
from babel.dates import format_datetime
from conftest import DIMS, grant_our_functions, login_role
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row
from streamlit.testing.v1 import AppTest

from core.agents.retail import ContextoCliente, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.db import Database
from core.history import views
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store
from core.privacy import subjects as subj
from core.storage import storage

# The single whole-table statements the batches replace, the reference: the refresh's (kept in views for the benches)
# and the coverage's (still the pages' live count before any sweep).
OLD_LIVE_THREAD_STORAGE = views.LIVE_THREAD_STORAGE
OLD_COVERAGE_SQL = subj.COVERAGE_SQL

COLUMNS = [c for c in views.LARGEST_COLUMNS if c != "computed_at"]  # what a refresh computes
KEYS = subj.Attribution().metadata_keys
CONFIGS = [
    subj.Attribution(),
    subj.Attribution(metadata_keys=("cliente_id",)),
    subj.Attribution(thread_patterns=()),
    subj.Attribution(metadata_keys=(), thread_patterns=()),
]
APP = "../dashboard.py"
PAGE = "app_pages/checkpoints.py"


def reference(db: Database) -> list[dict]:
    return db.fetch(OLD_LIVE_THREAD_STORAGE + " ORDER BY 1", read_only=False)


def kept(db: Database) -> list[dict]:
    return db.fetch(f"SELECT {', '.join(COLUMNS)} FROM core_thread_storage ORDER BY thread_id", read_only=False)


def reference_keys(db: Database, keys) -> dict[str, list[str]]:
    """Per thread with checkpoints, the keys of `keys` any of its checkpoints' metadata carries."""
    rows = db.fetch(
        "SELECT thread_id, array(SELECT k FROM unnest(%(keys)s::text[]) k WHERE EXISTS ("
        "  SELECT 1 FROM checkpoints c2 WHERE c2.thread_id = c.thread_id AND c2.metadata ? k) ORDER BY k) AS ks"
        " FROM (SELECT DISTINCT thread_id FROM checkpoints) c",
        {"keys": list(keys)},
    )
    return {r["thread_id"]: r["ks"] for r in rows}


def old_coverage(db: Database, config: subj.Attribution) -> tuple[int, int, int, int]:
    row = db.fetch_one(
        OLD_COVERAGE_SQL,
        {
            "keys": list(config.metadata_keys),
            "likes": [subj.like_for(p, None) for p in config.thread_patterns],
            "erased": [],  # no erasure in these tests (the register's threads are passed since issue 52, cluster E)
        },
    )
    return int(row["threads"]), int(row["unattributed_threads"]), int(row["bytes"]), int(row["unattributed_bytes"])


def figures(cov: subj.Coverage) -> tuple[int, int, int, int]:
    return cov.threads, cov.unattributed_threads, cov.bytes, cov.unattributed_bytes


def turns(db: Database, threads: dict[str, str], texts=("Prefiero recoger mis pedidos en la tienda Sierpes.",)) -> None:
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    agent = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(db.pool))
    for thread, customer in threads.items():
        for text in texts:
            run_turn(agent, ContextoCliente(customer), thread, text)


@pytest.fixture(scope="module")
def ours(create_database) -> Database:
    """Our agents' threads, plus threads left only in blobs and writes, only in blobs, only in writes (a checkpoints
    clean-up by hand, as operators do for retention), and pending writes the saver stored for a checkpoint that was
    never written (put_writes)."""
    db = Database(create_database(prefix="storebatch"))
    threads = {f"cliente-C{i}-1": f"C{i}" for i in range(1, 7)}
    threads.update({"hilo-only-blobs-writes": "C1", "hilo-only-blobs": "C2", "hilo-only-writes": "C3"})
    turns(db, threads, ("Prefiero recoger mis pedidos en la tienda Sierpes.", "¿Qué preferencias tengo guardadas?"))
    db.execute(
        "DELETE FROM checkpoints WHERE thread_id = ANY(%s)",
        (["hilo-only-blobs-writes", "hilo-only-blobs", "hilo-only-writes"],),
    )
    db.execute("DELETE FROM checkpoint_writes WHERE thread_id = 'hilo-only-blobs'")
    db.execute("DELETE FROM checkpoint_blobs WHERE thread_id = 'hilo-only-writes'")
    saver = PostgresSaver(db.pool)
    config = {"configurable": {"thread_id": "zz-pending-only", "checkpoint_ns": "", "checkpoint_id": "never-written"}}
    saver.put_writes(config, [("messages", "pendiente"), ("extra", {"a": 1})], task_id="task-1")
    yield db
    db.close()


def data_shapes(db: Database) -> None:
    """The cases the refresh must keep: threads in writes only, in blobs only, and threads of several rows."""
    only = db.fetch_one(
        """
        SELECT count(*) FILTER (WHERE checkpoints = 0 AND blobs = 0 AND writes > 0) AS writes_only,
               count(*) FILTER (WHERE checkpoints = 0 AND blobs > 0 AND writes = 0) AS blobs_only,
               count(*) FILTER (WHERE checkpoints > 2 AND blobs > 2 AND writes > 2) AS large
        FROM ("""
        + OLD_LIVE_THREAD_STORAGE
        + ") s",
        read_only=False,
    )
    assert only["writes_only"] >= 1 and only["blobs_only"] >= 1 and only["large"] >= 2, only


@pytest.mark.parametrize("batch_rows", [1, 2, 3, 7, storage.STORAGE_BATCH_ROWS])
def test_batched_refresh_equals_the_single_statement(ours, batch_rows):
    data_shapes(ours)
    expected = reference(ours)
    assert storage.refresh_thread_storage(ours, KEYS, batch_rows=batch_rows) == len(expected)
    assert kept(ours) == expected
    refresh = storage.storage_refresh(ours)
    n_rows = {
        t: ours.fetch_one(f"SELECT count(*) AS n FROM {t}")["n"]
        for t in ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
    }
    assert (refresh["checkpoints"], refresh["blobs"], refresh["writes"]) == tuple(n_rows.values())
    assert refresh["threads"] == len(expected) and refresh["metadata_keys"] == list(KEYS)
    if batch_rows == 2:  # batch boundaries fall inside the data: many batches, threads of more rows than a batch
        assert refresh["batches"] > 5
    keys = {
        r["thread_id"]: sorted(r["metadata_keys"])
        for r in ours.fetch("SELECT thread_id, metadata_keys FROM core_thread_storage")
    }
    ref_keys = reference_keys(ours, KEYS)
    assert keys == {t: ref_keys.get(t, []) for t in keys}
    assert any(keys.values())  # our agents tag cliente_id


def test_coverage_from_the_refresh_equals_the_single_statement(ours):
    storage.refresh_thread_storage(ours, KEYS, batch_rows=2)
    for config in CONFIGS:
        with ours.connection() as conn:
            assert figures(subj.coverage_from_storage(conn, config, batch_threads=2)) == old_coverage(ours, config)
    # the sweep's step: from the summary it has just refreshed
    cov = subj.refresh_coverage(ours, CONFIGS[0], storage_refreshed=True, batch_threads=3)
    assert figures(cov) == old_coverage(ours, CONFIGS[0]) and cov.as_of is not None


def test_on_the_article_agents_database(article_agents):
    """Stock savers, no metadata, `hilo` back-links in the preference documents, threads only in writes and blobs
    after a by-hand clean-up: the same rows and the same coverage, with batches of 2."""
    foreign = article_agents()
    db = Database(foreign.dsn)
    try:
        (chat,) = foreign.threads_of("C9", "chat")
        write = foreign.threads_of("C9", "write")[0]
        db.execute("DELETE FROM checkpoints WHERE thread_id = ANY(%s)", ([chat, write],))
        db.execute("DELETE FROM checkpoint_blobs WHERE thread_id = %s", (chat,))
        assert (
            db.fetch_one(
                "SELECT count(*) AS n FROM store WHERE prefix LIKE 'clientes.%%' "
                "AND jsonb_typeof(value -> 'hilo') = 'string'"
            )["n"]
            > 0
        )
        expected = reference(db)
        assert storage.refresh_thread_storage(db, KEYS, batch_rows=2) == len(expected)
        assert kept(db) == expected
        for config in CONFIGS:
            with db.connection() as conn:
                assert figures(subj.coverage_from_storage(conn, config, batch_threads=2)) == old_coverage(db, config)
        # standalone (no fresh summary): refreshes it first, then the same figures
        db.execute("DELETE FROM checkpoint_writes WHERE thread_id = %s", (chat,))
        cov = subj.refresh_coverage(db, CONFIGS[0], batch_rows=2, batch_threads=2)
        assert figures(cov) == old_coverage(db, CONFIGS[0])
        assert kept(db) == reference(db)
    finally:
        db.close()


def test_on_the_agent_server_database(agent_server_db):
    """Runs tagged user_id as LangGraph's Agent Server does: the key is recorded per thread and counts as tagged."""
    db = Database(agent_server_db.dsn)
    try:
        expected = reference(db)
        with db.connection() as conn, conn.transaction():
            storage.refresh_storage_conn(conn, KEYS, 2)
            rows = conn.execute(
                f"SELECT {', '.join(COLUMNS)}, metadata_keys FROM core_thread_storage ORDER BY thread_id"
            ).fetchall()
            raise psycopg.Rollback()  # a shared database: leave it as it was
        assert [{k: r[k] for k in COLUMNS} for r in rows] == expected
        assert any("user_id" in r["metadata_keys"] for r in rows)
        ref_keys = reference_keys(db, KEYS)
        assert {r["thread_id"]: sorted(r["metadata_keys"]) for r in rows} == {
            r["thread_id"]: ref_keys.get(r["thread_id"], []) for r in rows
        }
    finally:
        db.close()


def test_writes_during_the_refresh_wait_for_the_next_one(ours):
    """One snapshot for every batch: an agent's turn committed between two batches (a new thread, and a thread in a
    range not read yet) is in no row of this refresh, which equals the single statement before the turn; the next
    refresh has it."""
    before = reference(ours)
    written = []

    def turn_between_batches(batch: int, hi: str | None) -> None:
        if batch == 1:
            turns(ours, {"cliente-C1-1": "C1", "zzz-new-thread": "C7"})
            written.append(hi)

    with ours.connection() as conn, conn.transaction():
        storage.refresh_storage_conn(conn, KEYS, 2, on_batch=turn_between_batches)
    assert written and written[0] is not None and written[0] < "zzz-new-thread"
    assert kept(ours) == before
    after = reference(ours)
    assert after != before and "zzz-new-thread" in {r["thread_id"] for r in after}
    storage.refresh_thread_storage(ours, KEYS, batch_rows=2)
    assert kept(ours) == after


def test_a_temp_file_limit_the_single_statement_exceeds(ours):
    """The single statements spill to temp files when their whole-table sorts do not fit in work_mem (at 10M: more
    than 3 GB, and a full disk). At this test's size the planner would aggregate 10 threads in a hash in memory, so
    the role also has hash aggregation off: the plan it takes at scale, a sort of every row of each table by thread.
    Under a role with work_mem 64kB and temp_file_limit 64kB both old statements fail; the batched refresh and the
    coverage from it succeed, under the same settings, with the same results.

    The planner's inputs are pinned to the ones it has at scale (pin_at_scale_statistics): the three tables analyzed
    (autovacuum always has, on a production database) and thread_id uncorrelated with their physical order, as it
    is where many conversations write at once. Left to chance, this fixture's tables were sometimes analyzed by
    autovacuum before the test and sometimes not: analyzed, thread_id's correlation is ~1 here (the fixture writes
    one thread after another), the planner reads checkpoints and checkpoint_blobs in thread order through their
    thread_id indexes, no sort, no temp file, and the old statements did not raise (1 run in 14)."""
    role_dsn = login_role(
        ours.dsn,
        "tmplimit",
        "checkpoints, checkpoint_blobs, checkpoint_writes, core_thread_storage, "
        "core_thread_storage_refresh, store, core_conversations, core_erasure_register, "
        "core_coverage_snapshot, core_channel_storage, core_thread_growth, core_thread_orphans, core_sweep_log, "
        "core_store_shadow",
    )
    role = psycopg.conninfo.conninfo_to_dict(role_dsn)["user"]
    grant_our_functions(ours.dsn, role)  # the role is the sweep job's: the decoder's functions, as deployed
    ours.execute(f"ALTER ROLE {role} SET work_mem = '64kB'")
    ours.execute(f"ALTER ROLE {role} SET temp_file_limit = '64kB'")
    ours.execute(f"ALTER ROLE {role} SET enable_hashagg = off")
    limited = Database(role_dsn)
    try:
        pin_at_scale_statistics(ours)
        with psycopg.connect(role_dsn, autocommit=True, row_factory=dict_row) as conn:
            assert conn.execute("SHOW temp_file_limit").fetchone()["temp_file_limit"] == "64kB"
            assert conn.execute("SHOW enable_hashagg").fetchone()["enable_hashagg"] == "off"
            coverage_params = {"keys": list(KEYS), "likes": ["cliente-%"], "erased": []}
            for sql, params in ((OLD_LIVE_THREAD_STORAGE, None), (OLD_COVERAGE_SQL, coverage_params)):
                plan = "\n".join(r["QUERY PLAN"] for r in conn.execute("EXPLAIN " + sql, params))
                for table in CHECKPOINT_TABLES:  # the plan taken at scale: every row of each table sorted by thread
                    assert f"Sort Key: {table}.thread_id" in plan and f"Seq Scan on {table}" in plan, plan
            with pytest.raises(psycopg.errors.ConfigurationLimitExceeded, match="temp_file_limit"):
                conn.execute(OLD_LIVE_THREAD_STORAGE).fetchall()
            with pytest.raises(psycopg.errors.ConfigurationLimitExceeded, match="temp_file_limit"):
                conn.execute(OLD_COVERAGE_SQL, coverage_params).fetchall()
        expected = reference(ours)
        assert storage.refresh_thread_storage(limited, KEYS, batch_rows=2) == len(expected)
        assert kept(ours) == expected
        cov = subj.refresh_coverage(limited, CONFIGS[0], storage_refreshed=True, batch_threads=2)
        assert figures(cov) == old_coverage(ours, CONFIGS[0])
    finally:
        limited.close()
        for table in CHECKPOINT_TABLES:
            ours.execute(f"ALTER TABLE {table} RESET (autovacuum_enabled)")


CHECKPOINT_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


def pin_at_scale_statistics(db: Database) -> None:
    """The statistics the planner has for the checkpoint tables at scale: analyzed, and thread_id uncorrelated with
    the physical order (rows of many threads interleaved as conversations run at once). Autovacuum is off on them
    for the rest of the test, so an analyze of its own cannot put this fixture's correlation (~1: one thread
    written after another) back between here and the statements."""
    for table in CHECKPOINT_TABLES:
        db.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
    db.execute(f"ANALYZE {', '.join(CHECKPOINT_TABLES)}")
    for table in CHECKPOINT_TABLES:
        row = db.fetch_one(
            "SELECT pg_restore_attribute_stats('schemaname', current_schema()::text, 'relname', %s::text,"
            " 'attname', 'thread_id'::text, 'inherited', false, 'correlation', 0.0::real) AS ok",
            (table,),
            read_only=False,
        )
        assert row["ok"], table


# --- the Storage view ------------------------------------------------------------------------------------------


def open_storage(dsn: str, app_env, lang: str | None = None) -> AppTest:
    app_env(dsn)
    at = AppTest.from_file(APP, default_timeout=60)
    if lang:
        at.query_params["lang"] = lang
    at.session_state["checkpoints.view"] = "storage"  # the radio's value (its labels are translated)
    at.run()
    assert not at.exception
    at.switch_page(PAGE).run()
    assert not at.exception and at.radio(key="checkpoints.view").value == "storage"
    return at


def test_table_totals_are_the_refresh_counts_as_of_its_time(create_database, app_env):
    db = Database(create_database(prefix="totals"))
    try:
        turns(db, {"cliente-C1-1": "C1", "cliente-C2-1": "C2"})
        live = {
            t: db.fetch_one(f"SELECT count(*) AS n FROM {t}")["n"]
            for t in ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
        }
        # before any refresh: counted now, and said so
        totals = storage.table_totals(db)
        assert dict(zip(totals["table_name"], totals["rows"], strict=True)) == live and totals["as_of"].isna().all()
        at = open_storage(db.dsn, app_env)
        assert any("Filas contadas ahora" in c.value for c in at.caption)
        for table, n in live.items():
            assert as_int(metric(at, f"{table}: filas")) == n
        storage.refresh_thread_storage(db, KEYS)
        refreshed_at = storage.storage_refresh(db)["computed_at"]
        turns(db, {"cliente-C3-1": "C3"})  # after the refresh: not in the totals until the next one
        totals = storage.table_totals(db)
        assert dict(zip(totals["table_name"], totals["rows"], strict=True)) == live
        assert (totals["as_of"] == refreshed_at).all()
        sizes = {t: db.fetch_one("SELECT pg_total_relation_size(%s::regclass) AS n", (t,))["n"] for t in live}
        assert dict(zip(totals["table_name"], totals["total_bytes"], strict=True)) == sizes
        utc = __import__("datetime").timezone.utc
        stamp = {
            lang: format_datetime(refreshed_at, "medium", tzinfo=utc, locale=lang) + " UTC" for lang in ("es", "en")
        }
        at = open_storage(db.dsn, app_env)
        assert any(
            c.value.startswith(f"Filas exactas según una actualización hecha fuera de los barridos ({stamp['es']})")
            for c in at.caption
        ), [c.value for c in at.caption]
        for table, n in live.items():
            assert as_int(metric(at, f"{table}: filas")) == n
        at = open_storage(db.dsn, app_env, "en")
        assert any(
            c.value.startswith(f"Rows exact as of a refresh outside the sweeps ({stamp['en']})") for c in at.caption
        ), [c.value for c in at.caption]
        assert as_int(metric(at, "checkpoints: rows")) == live["checkpoints"]
    finally:
        db.close()
