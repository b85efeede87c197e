"""Issue 52: decoding on the agents' standby (PG_AGENTES_STANDBY) with the dashboard's tables still in the agents'
database (no PG_DASHBOARD). The follower's first recount reads the standby and stages the rows in temporary tables of
the primary (the staging tables exist only in a dashboard database of its own); the token indexer reads the rows on
the standby and writes the index on the primary. Both equal what the agents' rows hold."""

from __future__ import annotations

import psycopg
import pytest

from core.capture.follower import catch_up, drop_slot
from core.capture.verify import differences
from core.db import Database, decode_on
from core.migrate import migrate
from core.privacy import token_index as ti
from tests.capture_writes import our_agent_turns, store_writes
from tests.conftest import DIMS, dsn_for
from tests.test_token_index_split import index_rows, logical_pair, recomputed, scans  # noqa: F401


@pytest.mark.slow  # a server of its own and a streaming standby
def test_decoding_and_indexing_on_the_standby_with_our_tables_in_the_agents_database(logical_pair):  # noqa: F811
    base, standby = logical_pair
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute('CREATE DATABASE "agents_default_standby"')
    agents = dsn_for(base, "agents_default_standby")
    decode_on(agents, standby.dsn("agents_default_standby"))
    migrate(agents, DIMS)
    db = Database(agents)
    try:
        our_agent_turns(agents, 1, 4)
        store_writes(agents, 1, 30)
        catch_up(agents, timeout=120)  # the slot on the standby, the recount staged on the primary
        assert differences(agents) == {}
        before = scans(agents)
        assert ti.index_pending(db).threads > 0
        assert scans(agents) == before  # the rows indexed were read on the standby
        assert index_rows(agents) and index_rows(agents) == recomputed(agents)
    finally:
        db.close()
        drop_slot(agents)
