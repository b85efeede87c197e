"""Read side of the Sweeps page: the sweep log, expired-not-yet-swept, the expiry forecast, the TTL policy."""
from __future__ import annotations

import pandas as pd

from core.db import Database
from core.memory.reads import SELECT_EXPIRED_BY_ROOT
from core.memory.store import POLICIES, ROOTS, TTL_CONFIG

SELECT_RUNS = """
SELECT id, started_at, trigger, status, documents_deleted, vectors_deleted, deleted_by_root, retention_days,
       threads_found, threads_deleted, extract(epoch FROM finished_at - started_at) AS seconds, host, operator,
       dry_run, finished_at, erasure_recheck, error
FROM core_sweep_log ORDER BY started_at DESC, id DESC LIMIT %s"""

# Runs that deleted something for real, one row per (run, root); runs without per-root detail
# count under the root 'unknown'. A run that deleted nothing has no row (the run log lists it).
SELECT_DELETED_BY_ROOT = """
SELECT l.id AS run_id, l.started_at, l.trigger, coalesce(r.key, 'unknown') AS root,
       coalesce(r.value::bigint, l.documents_deleted) AS documents
FROM (SELECT * FROM core_sweep_log WHERE status IN ('ok', 'error') AND NOT dry_run
      ORDER BY started_at DESC, id DESC LIMIT %s) l
LEFT JOIN LATERAL jsonb_each_text(l.deleted_by_root) r ON true
WHERE coalesce(r.value::bigint, l.documents_deleted) > 0
ORDER BY l.started_at, l.id, root"""

# Weeks start on Monday (UTC); the last bucket ends a few days past the 12 months so that rows
# written a year ago today (clientes) are not cut off by the horizon. Documents expiring in the rest
# of today are counted live (an index range on expires_at); the following days come from the per-day
# summary core_expiry_days (core/sql/040_expiry_days.sql), not from ~80% of `store` (BENCHMARKS.md).
SELECT_FORECAST = """
WITH b AS (
    SELECT now() AS now, (now() AT TIME ZONE 'UTC')::date AS today,
           date_trunc('week', now() AT TIME ZONE 'UTC') AS first_week,
           date_trunc('week', (now() + make_interval(months => %(months)s)) AT TIME ZONE 'UTC')
               + interval '1 week' AS horizon
), weeks AS (
    SELECT generate_series(b.first_week, b.horizon - interval '1 week', interval '1 week') AS week FROM b
), expiring AS (
    SELECT week, root, sum(documents)::bigint AS documents FROM (
        SELECT date_trunc('week', s.expires_at AT TIME ZONE 'UTC') AS week, split_part(s.prefix, '.', 1) AS root,
               count(*) AS documents
        FROM store s, b
        WHERE s.expires_at >= b.now AND s.expires_at < (b.today + 1)::timestamp AT TIME ZONE 'UTC'
        GROUP BY 1, 2
        UNION ALL
        SELECT date_trunc('week', d.day::timestamp), d.root, d.documents
        FROM core_expiry_days d, b
        WHERE d.day > b.today AND d.day < b.horizon::date
    ) x GROUP BY 1, 2 HAVING sum(documents) <> 0
)
SELECT w.week AT TIME ZONE 'UTC' AS week, r.root, coalesce(e.documents, 0) AS documents
FROM weeks w CROSS JOIN unnest(%(roots)s::text[]) AS r(root)
LEFT JOIN expiring e ON e.week = w.week AND e.root = r.root
UNION ALL
SELECT e.week AT TIME ZONE 'UTC', e.root, e.documents FROM expiring e WHERE e.root <> ALL(%(roots)s::text[])
ORDER BY 1, 2"""

RUN_COLUMNS = ["id", "started_at", "trigger", "status", "documents_deleted", "vectors_deleted", "deleted_by_root",
               "retention_days", "threads_found", "threads_deleted", "seconds", "host", "operator", "dry_run",
               "finished_at", "erasure_recheck", "error"]


def sweep_runs(db: Database, limit: int = 200) -> pd.DataFrame:
    """The newest `limit` runs of the sweep log, newest first (deleted_by_root as a dict)."""
    df = pd.DataFrame(db.fetch(SELECT_RUNS, (limit,)), columns=RUN_COLUMNS)
    df["seconds"] = df["seconds"].astype(float)
    return df


def deleted_per_run(db: Database, limit: int = 200) -> pd.DataFrame:
    """Documents deleted per real run and namespace root (run_id, started_at, trigger, root, documents, run label)."""
    df = pd.DataFrame(db.fetch(SELECT_DELETED_BY_ROOT, (limit,)),
                      columns=["run_id", "started_at", "trigger", "root", "documents"])
    df["documents"] = df["documents"].astype(int)
    # A categorical label per run: runs are seconds or days apart, a time axis would crush them.
    df["run"] = [f"#{i} {t:%m-%d %H:%M}" for i, t in zip(df["run_id"], df["started_at"])]
    return df


def expired_by_root(db: Database) -> pd.DataFrame:
    """Documents expired now and not yet swept, per namespace root (every known root, zeros included)."""
    found = {r["root"]: r["expired"] for r in db.fetch(SELECT_EXPIRED_BY_ROOT)}
    roots = list(ROOTS) + sorted(set(found) - set(ROOTS))
    return pd.DataFrame({"root": roots, "expired": [int(found.get(r, 0)) for r in roots]})


def expiration_forecast(db: Database, months: int = 12) -> pd.DataFrame:
    """Documents that will expire per week and namespace root over the next `months` months,
    from `expires_at` as it is now (a read refreshing clientes/empleados moves them later)."""
    rows = db.fetch(SELECT_FORECAST, {"months": months, "roots": list(ROOTS)})
    df = pd.DataFrame(rows, columns=["week", "root", "documents"])
    df["documents"] = df["documents"].astype(int)
    return df


def ttl_configuration() -> pd.DataFrame:
    """The TTL configuration in force: one row per namespace root, with the store-wide settings."""
    sweeper = TTL_CONFIG.get("sweep_interval_minutes")
    return pd.DataFrame([
        {"root": p.root, "ttl_days": p.ttl_days, "ttl_minutes": p.ttl_minutes,
         "refresh_on_read": p.refresh_on_read, "omit_expired": bool(TTL_CONFIG.get("omit_expired")),
         "default_ttl_minutes": TTL_CONFIG.get("default_ttl"),
         "in_process_sweeper": "off" if sweeper is None else f"every {sweeper} min"}
        for p in POLICIES.values()
    ])

