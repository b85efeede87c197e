"""Issue 52, A': the agents' own logs (core_conversations, core_memory_writes) stay in the agents' database, written by
agent-side code; the change follower keeps a mirror of both in the dashboard's own database (publication: migration
171; mirrors: core/sql/dashboard/002). The mirrors equal the agents' rows after real turns of our retail agent (the
only writer of both logs: core/agents/retail.py, core/memory/store.py log_write; the articles' agents write neither),
after more turns applied batch by batch, and after the real erasure deletes a customer's rows; the follower writes
nothing in the agents' database meanwhile."""

from __future__ import annotations

import psycopg
import pytest

from core.capture import changes, pgoutput
from core.capture.follower import Follower, catch_up, flush_target, open_links, request_recount
from core.capture.verify import differences
from core.privacy.erasure import erase
from tests.capture_writes import article_turns, graph_turns, our_agent_turns, store_writes
from tests.test_own_database import written_there

LOGS = {table: columns for table, (columns, _) in changes.MIRRORED.items()}
SELECT_STATS = """
SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables WHERE relname = ANY(%s) ORDER BY relname"""


def rows(dsn: str, table: str) -> set[tuple]:
    with psycopg.connect(dsn) as conn:
        return {tuple(r) for r in conn.execute(f"SELECT {', '.join(LOGS[table])} FROM {table}").fetchall()}


def stats(dsn: str) -> list[tuple]:
    """What the agents' own logs of `dsn` received (statistics flushed first)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
    with psycopg.connect(dsn) as conn:
        return conn.execute(SELECT_STATS, (list(LOGS),)).fetchall()


def assert_mirrored(agents: str, ours: str) -> None:
    for table in LOGS:
        assert rows(ours, table) == rows(agents, table), table
    assert differences(agents) == {}


@pytest.mark.slow  # real agents write the database
def test_the_mirrors_equal_the_agents_logs_after_real_turns_and_an_erasure(split_db):
    agents, ours = split_db.dsn, split_db.ours.dsn
    our_agent_turns(agents, 1, 6)
    article_turns(agents, 1, 2)
    store_writes(agents, 1, 30)
    catch_up(agents)  # the slot's first recount copies both logs into ours
    assert all(rows(agents, table) for table in LOGS), "our agent wrote both logs"
    assert_mirrored(agents, ours)

    # more turns, applied by the follower's batches: new conversations, new turns of known ones (UPDATEs)
    turns_before = rows(agents, "core_conversations")
    our_agent_turns(agents, 2, 8)
    graph_turns(agents, 2, 3)
    catch_up(agents)
    assert rows(agents, "core_conversations") - turns_before, "some conversations were updated or started"
    assert_mirrored(agents, ours)

    # the real erasure deletes the customer's rows from the agents' own logs: the deletes reach the mirrors
    customer = next(subject for _, _, _, subject, *_ in rows(agents, "core_conversations"))
    erase(split_db, customer, operator="dpo@example.com")
    catch_up(agents)
    assert not any(r[3] == customer for r in rows(agents, "core_conversations"))
    assert_mirrored(agents, ours)

    # a requested recount copies them again, equal; the agents' logs receive nothing from the follower
    before = stats(agents)
    request_recount(agents)
    catch_up(agents)
    assert_mirrored(agents, ours)
    assert stats(agents) == before
    assert written_there(agents) == {}, "not one row of the follower's in the agents' database"
    assert {"core_capture_position", "core_checkpoint_shadow"} <= set(written_there(ours))
    assert all(inserted > 0 for _, inserted, _, _ in stats(ours)), "the mirrors are written in ours"


@pytest.mark.slow  # real agents write the database
def test_a_batch_applied_change_by_change_keeps_the_mirrors_exact(split_db):
    """Batches of a few changes each (many batches, conversations updated across them) give the same mirrors."""
    agents, ours = split_db.dsn, split_db.ours.dsn
    catch_up(agents)
    our_agent_turns(agents, 3, 6)
    small = Follower(agents, batch_changes=5)
    with open_links(agents) as links:
        small.drain(links, flush_target(links.primary))  # everything written so far, as catch_up does
    assert_mirrored(agents, ours)


def test_a_row_sent_without_a_column_is_read_from_its_row():
    """An UPDATE whose TOASTed column is unchanged is not sent whole (pgoutput 'u'): the fold asks for the row, and a
    later write of it in the batch settles it; a key change deletes the old key."""
    rel = pgoutput.Relation(1, "public", "core_conversations", "d", changes.MIRRORED["core_conversations"][0])
    full = ("h1", "atencion-cliente", "clientes", "C1", "2026-12-07 06:00:00+00", "2026-12-07 06:00:00+00", "1")
    partial = ("h1", pgoutput.UNCHANGED, "clientes", "C1", "2026-12-07 06:00:00+00", "2026-12-07 06:01:00+00", "2")
    moved = ("h2", *full[1:])
    t = changes.Transaction(1, 10)
    t.events += changes.message_events(pgoutput.Insert(1, full), {1: rel})
    t.events += changes.message_events(pgoutput.Update(1, None, None, partial), {1: rel})
    d = changes.fold([t], {}, lambda v: changes.NO_VALUE)
    assert d.log_rereads == {"core_conversations": {("h1",)}} and d.logs["core_conversations"] == {}
    t.events += changes.message_events(pgoutput.Update(1, ("h1",) + (None,) * 6, "K", moved), {1: rel})
    d = changes.fold([t], {}, lambda v: changes.NO_VALUE)
    assert d.log_rereads == {"core_conversations": set()}
    assert d.logs["core_conversations"] == {("h1",): None, ("h2",): moved}


@pytest.mark.slow  # real agents write the database
def test_rows_read_again_by_key_are_applied_as_the_agents_rows_hold_them(split_db):
    """Where the stream left a column out (an unchanged TOASTed value), the follower reads the row by its key where the
    slot is read and applies it whole: here every row of both logs, read that way, gives the agents' rows again."""
    agents, ours = split_db.dsn, split_db.ours.dsn
    catch_up(agents)
    our_agent_turns(agents, 4, 4)
    catch_up(agents)
    with psycopg.connect(ours, autocommit=True) as conn:
        conn.execute("TRUNCATE core_conversations, core_memory_writes")
    d = changes.Deltas()
    with psycopg.connect(agents) as conn:
        for table, (_, key) in changes.MIRRORED.items():
            d.log_rereads[table] = {(str(r[0]),) for r in conn.execute(f"SELECT {key[0]} FROM {table}")}
    with open_links(agents) as links, links.ours.transaction():
        Follower._read_logs(links, d)
        Follower._apply(links.ours, d)
    for table in LOGS:
        assert rows(ours, table) == rows(agents, table) and rows(ours, table), table
