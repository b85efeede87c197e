"""Read side of the Sweeps page: the sweep log, expired-not-yet-swept, the expiry forecast, the TTL policy."""

from __future__ import annotations

import re

import pandas as pd

from core.db import Database, one
from core.memory.reads import expired_counts
from core.memory.store import POLICIES, ROOTS, TTL_CONFIG

# In a dry run the counts are what a run would delete: `documents`, `vectors`, `threads` (retention) and the prune's.
SELECT_RUNS = """
SELECT id, started_at, status, trigger, documents_deleted AS documents, vectors_deleted AS vectors, deleted_by_root,
       retention_days, CASE WHEN dry_run THEN threads_found ELSE threads_deleted END AS threads,
       prune_policy ->> 'keep_latest' AS keep_latest, prune_threads, prune_checkpoints, prune_writes, prune_blobs,
       prune_bytes, extract(epoch FROM finished_at - started_at) AS seconds, host, operator, dry_run, finished_at,
       erasure_recheck, error
FROM core_sweep_log ORDER BY started_at DESC, id DESC LIMIT %s"""

# The last sweep, the same on every page: the newest run that swept for real (a dry run or a run refused by the
# lock is not one), whatever its outcome.
SELECT_LAST_SWEEP = """
SELECT id, started_at, finished_at, status, trigger FROM core_sweep_log
WHERE NOT dry_run AND status IN ('ok', 'error', 'running', 'stopped')
ORDER BY started_at DESC, id DESC LIMIT 1"""

SELECT_RUN_DOCUMENTS = "SELECT prefix, key FROM core_sweep_documents WHERE run_id = %s ORDER BY prefix, key"
SELECT_RUN_THREADS = """
SELECT t.thread_id FROM core_sweep_log l, jsonb_array_elements_text(coalesce(l.threads_sample, '[]')) AS t(thread_id)
WHERE l.id = %s"""
SELECT_RUN_PRUNED = """
SELECT thread_id, checkpoints, writes, blobs, bytes FROM core_prune_threads WHERE run_id = %s
ORDER BY bytes DESC, thread_id"""

# The erasure register's re-check summary as the job stores it (core.privacy.erasure_register.RecheckSummary):
# "re-checked N erasure request(s): C clean[, D with data back (request #i, #j)]".
RECHECK_TEXT = re.compile(
    r"re-checked (\d+) erasure request\(s\): (\d+) clean(?:, \d+ with data back \(request ([^)]*)\))?"
)

# Runs that deleted something for real, one row per (run, root); runs without per-root detail
# count under the root 'unknown'. A run that deleted nothing has no row (the run log lists it).
# Every real run, one row per root it deleted from; a run that deleted nothing is one row of 0 (in the first root),
# so the chart shows it too; a count without roots (an older row) is 'unknown'.
SELECT_DELETED_BY_ROOT = """
SELECT l.id AS run_id, l.started_at, l.trigger,
       coalesce(r.key, CASE WHEN coalesce(l.documents_deleted, 0) > 0 THEN 'unknown' ELSE %(first_root)s END) AS root,
       coalesce(r.value::bigint, l.documents_deleted, 0) AS documents
FROM (SELECT * FROM core_sweep_log WHERE status IN ('ok', 'error') AND NOT dry_run
      ORDER BY started_at DESC, id DESC LIMIT %(limit)s) l
LEFT JOIN LATERAL (SELECT key, value FROM jsonb_each_text(l.deleted_by_root) WHERE value::bigint > 0) r ON true
ORDER BY l.started_at, l.id, root"""

# Weeks start on Monday (UTC); the last bucket ends a few days past the 12 months so that rows
# written a year ago today (clientes) are not cut off by the horizon. Documents expiring in the rest
# of today are counted live in the agents' `store` (an index range on expires_at; today is in the first week); the
# following days come from the per-day summary core_expiry_days the change follower keeps in the dashboard's database,
# not from ~80% of `store` (BENCHMARKS.md). Two queries (issue 52): the agents' clock and today's slice, then the
# weeks in ours with those values as parameters.
SELECT_FORECAST_TODAY = """
WITH b AS (
    SELECT now() AS now, (now() AT TIME ZONE 'UTC')::date AS today,
           date_trunc('week', now() AT TIME ZONE 'UTC') AS first_week,
           date_trunc('week', (now() + make_interval(months => %(months)s)) AT TIME ZONE 'UTC')
               + interval '1 week' AS horizon
)
SELECT b.today, b.first_week, b.horizon,
       coalesce(array_agg(x.root) FILTER (WHERE x.root IS NOT NULL), '{}') AS live_roots,
       coalesce(array_agg(x.documents) FILTER (WHERE x.root IS NOT NULL), '{}') AS live_documents
FROM b LEFT JOIN LATERAL (
    SELECT split_part(s.prefix, '.', 1) AS root, count(*) AS documents FROM store s
    WHERE s.expires_at >= b.now AND s.expires_at < (b.today + 1)::timestamp AT TIME ZONE 'UTC' GROUP BY 1
) x ON true
GROUP BY b.today, b.first_week, b.horizon"""
SELECT_FORECAST = """
WITH b AS (
    SELECT %(today)s::date AS today, %(first_week)s::timestamp AS first_week, %(horizon)s::timestamp AS horizon
), weeks AS (
    SELECT generate_series(b.first_week, b.horizon - interval '1 week', interval '1 week') AS week FROM b
), expiring AS (
    SELECT week, root, sum(documents)::bigint AS documents FROM (
        SELECT b.first_week AS week, l.root, l.documents
        FROM b, unnest(%(live_roots)s::text[], %(live_documents)s::bigint[]) AS l(root, documents)
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

RUN_COLUMNS = [
    "id",
    "started_at",
    "status",
    "trigger",
    "documents",
    "vectors",
    "deleted_by_root",
    "retention_days",
    "threads",
    "keep_latest",
    "prune_threads",
    "prune_checkpoints",
    "prune_writes",
    "prune_blobs",
    "prune_bytes",
    "seconds",
    "host",
    "operator",
    "dry_run",
    "finished_at",
    "erasure_recheck",
    "error",
]
TEXT_COLUMNS = ["status", "trigger", "keep_latest", "host", "operator", "erasure_recheck", "error"]
RECHECK_COLUMNS = ["rechecked", "recheck_clean", "recheck_data_back"]


def recheck_parts(text: str | None) -> tuple:
    """The erasure re-check's summary (RECHECK_TEXT) as (re-checked, clean, request numbers with data back: "#i, #j"
    or ""); (None, None, None) for any other text. Pages say it in their language from these."""
    match = RECHECK_TEXT.fullmatch(text or "")
    if match is None:
        return None, None, None
    return int(match[1]), int(match[2]), match[3] or ""


# A run's "locked" step detail (core.operations.sweep.run_sweep): "run <id>".
LOCKED_TEXT = re.compile(r"run (\d+)")
# The physical erasure step's detail (core.privacy.physical.Settled.__str__): "physical erasure: nothing to settle",
# or "physical erasure: <files status>: #i, #j; <files status>: #k".
PHYSICAL_TEXT = re.compile(r"physical erasure: (.*)")
PHYSICAL_NOTHING = "nothing to settle"


def locked_run(detail: str | None) -> int | None:
    """The run id in a "locked" step's detail; None for any other text."""
    match = LOCKED_TEXT.fullmatch(detail or "")
    return None if match is None else int(match[1])


def physical_parts(text: str | None) -> dict[str, list[str]] | None:
    """The physical erasure step's summary as {files status: ["#i", ...]} ({} when there was nothing to settle);
    None for any other text."""
    match = PHYSICAL_TEXT.fullmatch(text or "")
    if match is None:
        return None
    if match[1] == PHYSICAL_NOTHING:
        return {}
    parts: dict[str, list[str]] = {}
    for part in match[1].split("; "):
        status, sep, requests = part.rpartition(": ")
        if not sep or not status:
            return None
        parts[status] = requests.split(", ")
    return parts


def sweep_runs(db: Database, limit: int = 200) -> pd.DataFrame:
    """The newest `limit` runs of the sweep log, newest first (deleted_by_root as a dict); in a dry run
    (`status` 'dry_run') the counts are what the run would delete. The erasure re-check's summary is split into
    `rechecked`, `recheck_clean` and `recheck_data_back` (request numbers); `erasure_recheck` keeps any other text."""
    rows = db.ours.fetch(SELECT_RUNS, (limit,))
    df = pd.DataFrame(rows, columns=RUN_COLUMNS)
    df["seconds"] = df["seconds"].astype(float)
    # pandas reads a text column with a NULL as strings and NaN: a text missing from a row (a run in progress, a row
    # of an older release) stays the database's None for every reader
    for column in TEXT_COLUMNS:
        df[column] = pd.Series([r[column] for r in rows], index=df.index, dtype="object")
    parsed = [recheck_parts(r["erasure_recheck"]) for r in rows]
    for i, column in enumerate(RECHECK_COLUMNS):
        df[column] = pd.Series([p[i] for p in parsed], index=df.index, dtype="object")
    df["erasure_recheck"] = [
        None if p[0] is not None else r["erasure_recheck"] for p, r in zip(parsed, rows, strict=True)
    ]
    return df


def last_sweep(db: Database) -> dict | None:
    """The last sweep (id, started_at, finished_at, status, trigger): the newest run that was not a dry run nor
    refused by the lock; None before the first. Every page that says "last sweep" reads it here."""
    return db.ours.fetch_one(SELECT_LAST_SWEEP)


def run_details(db: Database, run_id: int) -> dict[str, pd.DataFrame]:
    """What run `run_id` deleted (or, in a dry run, would delete): `documents` (prefix, key: the first
    DOCUMENTS_SAMPLE), `threads` (retention: the first THREADS_SAMPLE) and `pruned` (history pruning, per thread:
    checkpoints, writes, blobs, bytes)."""
    return {
        "documents": pd.DataFrame(db.ours.fetch(SELECT_RUN_DOCUMENTS, (run_id,)), columns=["prefix", "key"]),
        "threads": pd.DataFrame(db.ours.fetch(SELECT_RUN_THREADS, (run_id,)), columns=["thread_id"]),
        "pruned": pd.DataFrame(
            db.ours.fetch(SELECT_RUN_PRUNED, (run_id,)),
            columns=["thread_id", "checkpoints", "writes", "blobs", "bytes"],
        ),
    }


def deleted_per_run(db: Database, limit: int = 200) -> pd.DataFrame:
    """Documents deleted per real run and namespace root (run_id, started_at, trigger, root, documents, run label);
    a run that deleted nothing is there with 0."""
    df = pd.DataFrame(
        db.ours.fetch(SELECT_DELETED_BY_ROOT, {"limit": limit, "first_root": ROOTS[0]}),
        columns=["run_id", "started_at", "trigger", "root", "documents"],
    )
    df["documents"] = df["documents"].astype(int)
    # A categorical label per run: runs are seconds or days apart, a time axis would crush them.
    df["run"] = [f"#{i} {t:%m-%d %H:%M}" for i, t in zip(df["run_id"], df["started_at"], strict=True)]
    return df


def expired_by_root(db: Database) -> pd.DataFrame:
    """Documents expired now and not yet swept, per namespace root (every known root, zeros included)."""
    found = expired_counts(db)
    roots = list(ROOTS) + sorted(set(found) - set(ROOTS))
    return pd.DataFrame({"root": roots, "expired": [int(found.get(r, 0)) for r in roots]})


def expiration_forecast(db: Database, months: int = 12) -> pd.DataFrame:
    """Documents that will expire per week and namespace root over the next `months` months,
    from `expires_at` as it is now (a read refreshing clientes/empleados moves them later)."""
    today = one(db.fetch_one(SELECT_FORECAST_TODAY, {"months": months}))
    rows = db.ours.fetch(SELECT_FORECAST, {**today, "roots": list(ROOTS)})
    df = pd.DataFrame(rows, columns=["week", "root", "documents"])
    df["documents"] = df["documents"].astype(int)
    return df


def ttl_configuration() -> pd.DataFrame:
    """The TTL configuration in force: one row per namespace root, with the store-wide settings
    (`in_process_sweeper_minutes`: the store's own sweeper's interval, None when it is off)."""
    sweeper = TTL_CONFIG.get("sweep_interval_minutes")
    return pd.DataFrame(
        [
            {
                "root": p.root,
                "ttl_days": p.ttl_days,
                "ttl_minutes": p.ttl_minutes,
                "refresh_on_read": p.refresh_on_read,
                "omit_expired": bool(TTL_CONFIG.get("omit_expired")),
                "default_ttl_minutes": TTL_CONFIG.get("default_ttl"),
                "in_process_sweeper_minutes": sweeper,
            }
            for p in POLICIES.values()
        ]
    )
