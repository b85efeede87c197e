"""Where logical decoding is not allowed (issue 37 item 5): on a server with `wal_level = replica` no follower can
run; the sweep job recounts the follower's aggregates from the tables (no trigger either way), every aggregate equals
a recount after stock writes, and Memoria says its figures are as of that recount. Where a slot follows the database,
the sweep leaves the aggregates to its follower (a recount would count what the slot still holds twice)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from capture_writes import store_writes
from conftest import DIMS, dsn_for
from streamlit.testing.v1 import AppTest

from core.capture.follower import CaptureNotAllowed, catch_up, drop_slot
from core.capture.recount import recount_without_slot
from core.capture.verify import differences
from core.db import Database
from core.migrate import migrate
from core.operations.sweep import run_sweep

APP = "../dashboard.py"


@pytest.mark.slow  # a server of its own
def test_without_logical_decoding_the_sweep_recounts_and_memory_says_as_of(replica_wal_server, app_env):
    base, _control = replica_wal_server
    with psycopg.connect(base, autocommit=True) as conn:
        assert conn.execute("SHOW wal_level").fetchone() == ("replica",)
        conn.execute('CREATE DATABASE "recount"')
    dsn = dsn_for(base, "recount")
    migrate(dsn, DIMS)
    with pytest.raises(CaptureNotAllowed, match="wal_level is replica"):
        catch_up(dsn)
    db = Database(dsn)
    try:
        store_writes(dsn, seed=7)
        assert differences(dsn)  # nothing keeps the aggregates between sweeps
        result = run_sweep(db, trigger="manual")
        assert result.status == "ok", result
        assert differences(dsn) == {}
        with psycopg.connect(dsn) as conn:
            dirty = conn.execute("SELECT count(*) FROM core_token_dirty").fetchone()
            threads = conn.execute("SELECT count(DISTINCT thread_id) FROM checkpoints").fetchone()
        assert dirty == threads  # the first recount marks every thread for the token index

        app_env(dsn)
        at = AppTest.from_file(APP, default_timeout=60)
        at.run()
        at.switch_page("app_pages/memory.py").run()
        assert not at.exception
        assert any("último recuento del barrido" in i.value for i in at.info), [i.value for i in at.info]

        store_writes(dsn, seed=8)  # more writes, then the next sweep
        assert run_sweep(db, trigger="manual").status == "ok"
        assert differences(dsn) == {}
    finally:
        db.close()


@pytest.mark.slow  # a server of its own, the article's agents writing
def test_the_recount_mode_on_a_database_the_articles_agents_wrote(replica_wal_server):
    """The same on a database written by the memory article's agents (stock savers, their own threads and
    documents), migrated as a user would after the fact: the sweep's recount equals a recount, and again after more
    of their conversations."""
    from foreign_agents import run_conversations, script, write_article_agents

    base, _control = replica_wal_server
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute('CREATE DATABASE "recount_article"')
    dsn = dsn_for(base, "recount_article")
    write_article_agents(dsn)
    migrate(dsn, DIMS)
    db = Database(dsn)
    try:
        assert run_sweep(db, trigger="manual").status == "ok"
        assert differences(dsn) == {}
        run_conversations(dsn, script()[:6])
        assert differences(dsn)  # nothing keeps the aggregates between sweeps
        assert run_sweep(db, trigger="manual").status == "ok"
        assert differences(dsn) == {}
    finally:
        db.close()


LATE_PHONE = "655443322"


def _recounted_at(dsn: str):
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT max(recounted_at) FROM core_capture_position").fetchone()
    assert row is not None and row[0] is not None
    return row[0]


def _late_turn_ours(dsn: str, control, journal_dir) -> tuple[str, str]:
    """Our retail agent on the dual saver: PostgreSQL stops, the turn (another customer's conversation holding C81's
    phone) is buffered while degraded, three hours ago by the agent's clock (an outage that long); PostgreSQL comes
    back and the saver replays the buffer: the checkpoints reach the tables now, with their original times."""
    import time_machine

    from agent_memory_runtime.dual_saver import DualCheckpointSaver
    from core.agents.retail import ContextoCliente, build_agent, run_turn
    from core.agents.scripted_model import ScriptedChatModel
    from core.memory.embeddings import OfflineHashEmbeddings
    from core.memory.store import build_store, put_memory

    db = Database(dsn)
    try:
        store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
        put_memory(store, ("clientes", "C81"), "pref-contacto", {"tipo": "contacto", "valor": LATE_PHONE})
        assert run_sweep(db, trigger="manual").status == "ok"  # the recount before the late write
    finally:
        db.close()
    with DualCheckpointSaver(dsn, heartbeat_interval=0.3, replica_id="late", journal_dir=journal_dir) as saver:
        agent = build_agent("atencion-cliente", ScriptedChatModel(), store=None, checkpointer=saver)
        control.stop()
        try:
            with time_machine.travel(datetime.now(UTC) - timedelta(hours=3), tick=True):
                run_turn(agent, ContextoCliente("C82"), "hilo-tarde", f"Mi vecino tiene el {LATE_PHONE}, llamadle.")
            assert saver.degraded
        finally:
            control.start()
        assert saver.wait_for("healthy", 30)
    return "C81", "hilo-tarde"


def _late_turn_article(dsn: str) -> tuple[str, str]:
    """The memory article's agents (stock savers) wrote the database; after the recount one of their conversations
    reaches the tables carrying times three hours old (its agent's clock three hours behind)."""
    import time_machine
    from foreign_agents import CUSTOMERS, Conversation, run_conversations, thread_id_for, write_article_agents

    write_article_agents(dsn)
    migrate(dsn, DIMS)
    db = Database(dsn)
    try:
        assert run_sweep(db, trigger="manual").status == "ok"  # the recount before the late write
    finally:
        db.close()
    late = thread_id_for(f"{CUSTOMERS[0]}/late")
    with time_machine.travel(datetime.now(UTC) - timedelta(hours=3), tick=True):
        run_conversations(dsn, [Conversation(late, CUSTOMERS[0], "chat")])
    return CUSTOMERS[0], late


@pytest.mark.slow  # a server of its own, stopped for the outage
@pytest.mark.parametrize("agents", ["ours", "article"])
def test_the_recount_lists_a_thread_written_late_with_old_times(replica_wal_server, agents, tmp_path):
    """Issue 51 #3: in the recount mode a thread whose checkpoints reach the tables after a recount, carrying times
    older than it (the dual saver's replay keeps the original times), is listed for the token index by the next
    recount: the erasure's residue scan reads it and proposes it, so the request is not complete while nobody decided
    on it; the sweep then indexes it."""
    from core.privacy import erasure, evidence
    from core.privacy import subjects as subj
    from core.privacy import token_index as ti

    base, control = replica_wal_server
    name = f"recount_late_{agents}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = dsn_for(base, name)
    if agents == "ours":
        migrate(dsn, DIMS)
        customer, late = _late_turn_ours(dsn, control, tmp_path / "journal")
    else:
        customer, late = _late_turn_article(dsn)
    recounted = _recounted_at(dsn)
    with psycopg.connect(dsn) as conn:
        written = conn.execute(
            "SELECT max((checkpoint ->> 'ts')::timestamptz) FROM checkpoints WHERE thread_id = %s", (late,)
        ).fetchone()
    assert written is not None and written[0] < recounted - timedelta(hours=1)  # older than the recount's margin

    db = Database(dsn)
    try:
        config = subj.Attribution()
        preview = evidence.preview(db, customer, config)  # its sync recounts: the late thread is listed, then read
        assert late in preview.residue_threads, preview.residue_threads
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT 1 FROM core_token_dirty WHERE thread_id = %s", (late,)).fetchone()
        others = {t: "erase" for t in preview.residue_threads if t != late}
        result = erasure.erase(db, customer, operator="dpo@example.com", config=config, decisions=others)
        assert result.status != "complete", result.report
        assert late in {r["thread_id"] for r in result.residue}
        assert run_sweep(db, trigger="manual").status == "ok"  # indexed now: the index itself names it
        with db.connection() as conn:
            found = ti.candidates(conn, [customer if agents == "article" else LATE_PHONE])
        assert late in found.hit_threads and late not in found.unindexed, found.describe()
    finally:
        db.close()


def test_with_a_slot_the_sweep_leaves_the_aggregates_to_the_follower(create_database):
    dsn = create_database(prefix="recount_slot")
    catch_up(dsn)  # a slot follows the database; its follower is not running now
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE core_prefix_counts SET documents = documents")  # nothing to count yet
            before = conn.execute("SELECT recounted_at FROM core_capture_position").fetchall()
        store_writes(dsn, seed=3, n=30)  # held by the slot, not applied
        recount = recount_without_slot(dsn)
        assert not recount.done and "follows this database" in recount.reason
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT recounted_at FROM core_capture_position").fetchall() == before
        catch_up(dsn)  # the follower applies what the slot held: counted once
        assert differences(dsn) == {}
    finally:
        drop_slot(dsn)
