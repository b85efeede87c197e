"""Replica health as the Degradation page reads it: the tables each process running the dual saver writes
(agent_memory_runtime.replica_health), read back as DataFrames. Tables: migration 003_replica_health.sql.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pandas as pd

from core.db import Database

SELECT_REPLICAS = """
SELECT replica_id, host, pid,
       CASE WHEN state <> 'stopped' AND updated_at < now() - make_interval(secs => 3 * heartbeat_interval_s + 5)
            THEN 'silent' ELSE state END                              AS state,
       state                                                          AS reported_state,
       degraded_since, buffered_checkpoints, buffered_writes, last_success, started_at,
       updated_at                                                     AS last_heartbeat,
       extract(epoch FROM now() - updated_at)::float8                 AS seconds_since_heartbeat,
       episodes_total, denials_total, refusals_total
FROM core_replica_heartbeat
ORDER BY (state = 'degraded') DESC, updated_at DESC"""

# `n` numbers the episodes 1, 2, 3... in the order they began (`id` is the table's key: a sequence, whose gaps
# mean nothing to a reader)
NUMBERED_EPISODES = """
SELECT *, row_number() OVER (ORDER BY degraded_from, id) AS n FROM core_degradation_episodes"""
SELECT_EPISODES = f"""
SELECT id, n, replica_id, host, pid, degraded_from, degraded_to,
       extract(epoch FROM degraded_to - degraded_from)::float8 AS seconds_degraded,
       reason, checkpoints_buffered, writes_buffered, ops_resynced, resync_ms,
       jsonb_array_length(denials) AS denials_count, denials, recorded_at
FROM ({NUMBERED_EPISODES}) e
WHERE degraded_from >= %(since)s
ORDER BY degraded_from DESC LIMIT %(limit)s"""

SELECT_DENIALS = f"""
SELECT d.denied_at, d.tool, d.risk, d.thread_id, d.customer_id, d.subject_root, d.subject_id,
       d.replica_id, d.episode_id, e.n AS episode_n, d.reason
FROM core_guard_denials d LEFT JOIN ({NUMBERED_EPISODES}) e ON e.id = d.episode_id
WHERE d.denied_at >= %(since)s AND (%(episode_id)s::bigint IS NULL OR d.episode_id = %(episode_id)s)
ORDER BY d.denied_at DESC LIMIT %(limit)s"""

SELECT_REFUSALS = """
SELECT refused_at, type_name, kind, thread_id, checkpoint_id, replica_id
FROM core_serde_refusals WHERE refused_at >= %(since)s ORDER BY refused_at DESC LIMIT %(limit)s"""

SELECT_DEAD_LETTERS = """
SELECT created_at, replica_id, thread_id, kind, error
FROM core_checkpoint_dead_letters ORDER BY created_at DESC, id DESC LIMIT %(limit)s"""

SELECT_SUMMARY = """
SELECT (SELECT count(*) FROM core_replica_heartbeat WHERE state <> 'stopped')                       AS replicas,
       (SELECT count(*) FROM core_replica_heartbeat WHERE state = 'degraded')                        AS degraded,
       (SELECT count(*) FROM core_replica_heartbeat WHERE state <> 'stopped'
          AND updated_at < now() - make_interval(secs => 3 * heartbeat_interval_s + 5))              AS silent,
       (SELECT count(*) FROM core_degradation_episodes WHERE degraded_from >= %(since)s)              AS episodes,
       (SELECT count(*) FROM core_guard_denials WHERE denied_at >= %(since)s)                        AS denials,
       (SELECT count(*) FROM core_serde_refusals WHERE refused_at >= %(since)s)                      AS refusals,
       (SELECT max(degraded_to) FROM core_degradation_episodes)                                      AS
       last_episode_end"""
# ... and what the extraction keeps, in the dashboard's own database (issue 52: a second query, not a join).
SELECT_EXTRACTION_SUMMARY = """
SELECT (SELECT count(*) FROM core_refused_payloads)                                                  AS refused_in_sql,
       (SELECT updated_at FROM core_extract_watermark WHERE name = 'tool_calls')                     AS
       refused_scanned_at"""

# Payloads the SQL decoder marks refused (migration 021), as found by the incremental extraction
# (core/history/tool_calls.py, run by the sweep job and the Preferences page): what is in the
# database, whether or not an agent has tried to load it yet.
SELECT_REFUSED_IN_SQL = """
SELECT found_at, refused_type, kind, channel, thread_id, checkpoint_id
FROM core_refused_payloads ORDER BY found_at DESC, thread_id LIMIT %(limit)s"""

EPOCH = datetime(1970, 1, 1)


def replicas(db: Database) -> pd.DataFrame:
    """One row per replica; `state` is 'silent' when its heartbeat is overdue (3 intervals + 5 s)."""
    return pd.DataFrame(db.fetch(SELECT_REPLICAS))


def episodes(db: Database, since: datetime | None = None, limit: int = 200) -> pd.DataFrame:
    """Degradation episodes, newest first."""
    return pd.DataFrame(db.fetch(SELECT_EPISODES, {"since": since or EPOCH, "limit": limit}))


def denials(
    db: Database, since: datetime | None = None, episode_id: int | None = None, limit: int = 500
) -> pd.DataFrame:
    """Tool calls the fail-closed guard denied, newest first (optionally of one episode)."""
    return pd.DataFrame(db.fetch(SELECT_DENIALS, {"since": since or EPOCH, "episode_id": episode_id, "limit": limit}))


def refusals(db: Database, since: datetime | None = None, limit: int = 500) -> pd.DataFrame:
    """Checkpoint payloads the serializer refused, newest first."""
    return pd.DataFrame(db.fetch(SELECT_REFUSALS, {"since": since or EPOCH, "limit": limit}))


def refused_in_sql(db: Database, limit: int = 500) -> pd.DataFrame:
    """Checkpoint payloads in the database that the serializer would refuse, newest found first."""
    return pd.DataFrame(
        db.ours.fetch(SELECT_REFUSED_IN_SQL, {"limit": limit}),
        columns=["found_at", "refused_type", "kind", "channel", "thread_id", "checkpoint_id"],
    )


def dead_letters(db: Database, limit: int = 500) -> pd.DataFrame:
    """Buffered operations PostgreSQL refused on replay (core_checkpoint_dead_letters), newest first."""
    return pd.DataFrame(
        db.fetch(SELECT_DEAD_LETTERS, {"limit": limit}),
        columns=["created_at", "replica_id", "thread_id", "kind", "error"],
    )


def summary(db: Database, since: datetime | None = None) -> dict[str, Any]:
    """Counts for the page's tiles: replicas, degraded, silent, episodes, denials, refusals (the agents' own tables),
    refused payloads found by the extraction and when it last ran (ours)."""
    found = dict(db.fetch_one(SELECT_SUMMARY, {"since": since or EPOCH}) or {})
    return found | dict(db.ours.fetch_one(SELECT_EXTRACTION_SUMMARY) or {})
