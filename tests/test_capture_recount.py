"""Where logical decoding is not allowed (issue 37 item 5): on a server with `wal_level = replica` no follower can
run; the sweep job recounts the follower's aggregates from the tables (no trigger either way), every aggregate equals
a recount after stock writes, and Memoria says its figures are as of that recount. Where a slot follows the database,
the sweep leaves the aggregates to its follower (a recount would count what the slot still holds twice)."""

from __future__ import annotations

import psycopg
import pytest
from capture_writes import store_writes
from conftest import DIMS, dsn_for, own_embedded_server
from streamlit.testing.v1 import AppTest

from core.capture.follower import CaptureNotAllowed, catch_up, drop_slot
from core.capture.recount import recount_without_slot
from core.capture.verify import differences
from core.db import Database
from core.migrate import migrate
from core.operations.sweep import run_sweep

APP = "../dashboard.py"


@pytest.fixture(scope="module")
def replica_wal_server(tmp_path_factory):
    """A server of its own, restarted with `wal_level = replica` (the embedded default is `logical`)."""
    servers = own_embedded_server(tmp_path_factory, "wal-replica")
    base, control = next(servers)
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET wal_level = 'replica'")
    control.stop()
    control.start()
    yield base, control
    next(servers, None)  # its teardown


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
