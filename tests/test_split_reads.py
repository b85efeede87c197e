"""Issue 52: the Memory and Sweeps pages' reads of what the change follower keeps (core_root_counts,
core_prefix_counts, core_expiry_days, core_checkpoint_shadow) with the dashboard's database apart. Each is two
queries, never a join across the databases: the counts from ours, today's slice and the keys from the agents'. On
data written by the real tools (stock PostgresStore, a graph on PostgresSaver, our agent, the articles' agents),
with documents expired on past days and earlier today, every read equals its live count over the agents' tables and
the agents' database receives nothing of ours."""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd
import psycopg
import pytest
from psycopg.rows import dict_row

from core.capture.follower import catch_up
from core.history import views
from core.memory import reads
from core.memory.store import MAX_DOCS_PER_CUSTOMER
from core.operations import exporter, sweep_reads
from tests.capture_writes import article_turns, graph_turns, our_agent_turns, store_writes, vector_store
from tests.test_own_database import FOLLOWER_TABLES, written_there
from tests.test_root_counts import LIVE_BY_ROOT, LIVE_TOTALS

pytestmark = pytest.mark.slow  # real agents write the database

SPREAD = """
UPDATE store SET expires_at = %(now)s + make_interval(days => (abs(hashtext(key || prefix)) %% 9) - 4)"""
LIVE_FORECAST_TOTAL = """
SELECT split_part(prefix, '.', 1) AS root, count(*) AS documents FROM store
WHERE expires_at >= now() AND expires_at < date_trunc('week', (now() + interval '12 months') AT TIME ZONE 'UTC')
    AT TIME ZONE 'UTC' + interval '1 week' GROUP BY 1"""
LIVE_RECENT = """
SELECT thread_id FROM checkpoints GROUP BY thread_id
ORDER BY max(checkpoint ->> 'ts') DESC, thread_id LIMIT %s"""


def test_every_read_of_the_follower_counts_equals_the_live_counts_with_our_database_apart(split_db):
    db = split_db
    store_writes(db.dsn, 7, 80)
    graph_turns(db.dsn, 7, 6)
    our_agent_turns(db.dsn, 7, 2)
    article_turns(db.dsn, 7, 2)
    conn, store = vector_store(db.dsn)  # one customer over the closed schema, through the stock store
    with conn:
        for i in range(MAX_DOCS_PER_CUSTOMER + 2):
            store.put(("clientes", "C99"), f"nota-{i}", {"texto": f"nota {i}"}, index=False)
    # expiries on past days, earlier today, later today and coming days (the clock cannot be moved), as written
    # by the agents' store: test_root_counts does the same
    db.execute(SPREAD, {"now": datetime.now(UTC)})
    db.execute("UPDATE store SET expires_at = now() - interval '1 second' WHERE key LIKE '%%-1'")
    catch_up(db.dsn)

    live = db.fetch_one(LIVE_TOTALS)
    assert live["documents"] > 0 and live["expired"] > 0
    assert reads.memory_totals(db) == reads.MemoryTotals(**live)
    pd.testing.assert_frame_equal(
        reads.documents_by_root(db),
        pd.DataFrame(db.fetch(LIVE_BY_ROOT), columns=["root", "documents", "namespaces", "expired"]),
    )
    expired = sweep_reads.expired_by_root(db).set_index("root")["expired"].to_dict()
    assert {r: n for r, n in expired.items() if n} == {r["root"]: r["expired"] for r in db.fetch(LIVE_BY_ROOT)}

    top = reads.top_prefixes(db, limit=5)
    assert len(top) == 5
    for row in top.itertuples():
        assert row.documents == db.fetch_one("SELECT count(*) AS n FROM store WHERE prefix = %s", (row.prefix,))["n"]
        assert (
            row.expired
            == db.fetch_one("SELECT count(*) AS n FROM store WHERE prefix = %s AND expires_at < now()", (row.prefix,))[
                "n"
            ]
        )
    over = reads.oversized_customers(db)
    live_over = db.fetch(
        "SELECT prefix, string_agg(key, ', ' ORDER BY key) AS keys FROM store WHERE prefix LIKE 'clientes.%%'"
        " GROUP BY prefix HAVING count(*) > %s ORDER BY count(*) DESC, prefix",
        (MAX_DOCS_PER_CUSTOMER,),
    )
    assert live_over and list(over["prefix"]) == [r["prefix"] for r in live_over]
    assert list(over["keys"]) == [r["keys"] for r in live_over]
    some = top["prefix"].iloc[0]
    assert some in set(reads.suggest_namespaces(db, some[:-1])["prefix"])

    forecast = sweep_reads.expiration_forecast(db).groupby("root")["documents"].sum()
    assert {r: int(n) for r, n in forecast.items() if n} == {
        r["root"]: r["documents"] for r in db.fetch(LIVE_FORECAST_TOTAL)
    }

    with psycopg.connect(db.dsn, row_factory=dict_row) as conn:  # the exporter's gauges read the same two ways
        gauges = {m.name: m for m in exporter.database_metrics(conn)}
    shown = {s.labels["root"]: s.value for s in gauges[exporter.PREFIX + "store_expired_documents"].samples if s.value}
    assert shown == {r["root"]: r["expired"] for r in db.fetch(LIVE_BY_ROOT) if r["expired"]}
    over = gauges[exporter.PREFIX + "customers_over_schema"].samples[0].value
    assert over == len(live_over)

    recent = views.recent_threads(db, limit=5)
    assert list(recent["thread_id"]) == [r["thread_id"] for r in db.fetch(LIVE_RECENT, (5,))]

    assert not set(written_there(db.dsn)) & set(FOLLOWER_TABLES)  # nothing of the follower's in the agents' database
