"""The expiration forecast from the per-day summary core_expiry_days (core/sql/040_expiry_days.sql)
equals the live GROUP BY over `store` it replaced, after every kind of write the agents and the jobs
make: batch inserts with each root's TTL, overwrites, TTL refreshes, deletes, a sweep, a truncate."""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd
from langgraph.store.base import PutOp

from core.capture.follower import catch_up
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import ROOTS, build_store, ttl_for
from core.operations import sweep, sweep_reads
from tests.conftest import DIMS

# The live query the summary replaced (core/operations/sweep_reads.py before 040), in UTC weeks.
LIVE_FORECAST = """
WITH weeks AS (
    SELECT generate_series(date_trunc('week', now() AT TIME ZONE 'UTC'),
                           (now() + make_interval(months => %(months)s)) AT TIME ZONE 'UTC', interval '1 week') AS week
), expiring AS (
    SELECT date_trunc('week', expires_at AT TIME ZONE 'UTC') AS week, split_part(prefix, '.', 1) AS root, count(*)
    AS documents
    FROM store
    WHERE expires_at >= now() AND expires_at < (date_trunc('week', (now() + make_interval(months => %(months)s)) AT
    TIME ZONE 'UTC')
                                                + interval '1 week') AT TIME ZONE 'UTC'
    GROUP BY 1, 2
)
SELECT w.week AT TIME ZONE 'UTC' AS week, r.root, coalesce(e.documents, 0) AS documents
FROM weeks w CROSS JOIN unnest(%(roots)s::text[]) AS r(root)
LEFT JOIN expiring e ON e.week = w.week AND e.root = r.root
UNION ALL
SELECT e.week AT TIME ZONE 'UTC', e.root, e.documents FROM expiring e WHERE e.root <> ALL(%(roots)s::text[])
ORDER BY 1, 2"""


def live(db) -> pd.DataFrame:
    df = pd.DataFrame(
        db.fetch(LIVE_FORECAST, {"months": 12, "roots": list(ROOTS)}), columns=["week", "root", "documents"]
    )
    df["documents"] = df["documents"].astype(int)
    return df


def same_as_live(db) -> None:
    catch_up(db.dsn)  # the change follower applies what was written (core/capture)
    got = sweep_reads.expiration_forecast(db)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), live(db).reset_index(drop=True))


def test_forecast_from_the_summary_equals_the_live_count(db):
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    ops = []
    for root, n in (("clientes", 40), ("proveedores", 25), ("empleados", 15)):
        for i in range(n):
            ns = (root, f"X{i % 7}")
            ops.append(PutOp(ns, f"k-{i}", {"texto": f"{root} {i}"}, index=False, ttl=ttl_for(ns)))
    store.batch(ops)
    same_as_live(db)
    assert sweep_reads.expiration_forecast(db)["documents"].sum() == 80

    # expiries spread over the year, a few later today, a few already expired, one past the horizon
    now = datetime.now(UTC)
    db.execute(
        "UPDATE store SET expires_at = %s + make_interval(days => (abs(hashtext(key || prefix)) %% 400) - 20)", (now,)
    )
    db.execute("UPDATE store SET expires_at = %s + interval '1 minute' WHERE key IN ('k-1', 'k-2')", (now,))
    same_as_live(db)
    # overwrites and TTL refreshes (an UPDATE of expires_at), deletes, a sweep of the expired ones
    store.batch([PutOp(("clientes", "X1"), "k-1", {"texto": "otra vez"}, index=False, ttl=ttl_for(("clientes", "X1")))])
    db.execute("UPDATE store SET expires_at = expires_at + interval '3 days' WHERE prefix = 'empleados.X2'")
    store.batch([PutOp(("proveedores", "X3"), "k-3", None)])
    same_as_live(db)
    sweep.run_sweep(db, trigger="manual")
    same_as_live(db)
    assert db.fetch_one("SELECT count(*) AS n FROM store WHERE expires_at < now()")["n"] == 0
    # the summary itself equals a GROUP BY of store, day by day
    summary = {
        (r["day"], r["root"]): r["documents"]
        for r in db.fetch("SELECT day, root, documents FROM core_expiry_days WHERE documents <> 0")
    }
    direct = {
        (r["day"], r["root"]): r["n"]
        for r in db.fetch(
            "SELECT (expires_at AT TIME ZONE 'UTC')::date AS day, split_part(prefix, '.', 1) AS root, count(*) AS n "
            "FROM store GROUP BY 1, 2"
        )
    }
    assert summary == direct and summary
    db.execute("TRUNCATE store CASCADE")
    catch_up(db.dsn)
    assert db.fetch_one("SELECT count(*) AS n FROM core_expiry_days")["n"] == 0
    same_as_live(db)
