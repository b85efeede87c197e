"""Replica health: what each process running the dual saver writes, and what the SRE page reads.

Written by `core.checkpoints.dual_saver.DualCheckpointSaver` (heartbeat every few seconds while PostgreSQL
is reachable; on recovery the degradation episode, the guard's denials and the serializer's
refusals kept in memory during the outage). Read back here as DataFrames for the Degradation
page. Tables: migration 003_replica_health.sql.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pandas as pd
import psycopg
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from core.db import Database

# --- write side (called by the dual saver with a connection of its own pool) ---------------

UPSERT_HEARTBEAT = """
INSERT INTO core_replica_heartbeat AS h (replica_id, host, pid, state, degraded_since, buffered_checkpoints,
    buffered_writes, last_success, started_at, heartbeat_interval_s, episodes_total, denials_total,
    refusals_total, updated_at)
VALUES (%(replica_id)s, %(host)s, %(pid)s, %(state)s, %(degraded_since)s, %(buffered_checkpoints)s,
    %(buffered_writes)s, %(last_success)s, %(started_at)s, %(heartbeat_interval_s)s, %(episodes_total)s,
    %(denials_total)s, %(refusals_total)s, now())
ON CONFLICT (replica_id) DO UPDATE SET
    host = EXCLUDED.host, pid = EXCLUDED.pid, state = EXCLUDED.state, degraded_since = EXCLUDED.degraded_since,
    buffered_checkpoints = EXCLUDED.buffered_checkpoints, buffered_writes = EXCLUDED.buffered_writes,
    last_success = EXCLUDED.last_success, started_at = EXCLUDED.started_at,
    heartbeat_interval_s = EXCLUDED.heartbeat_interval_s, episodes_total = EXCLUDED.episodes_total,
    denials_total = EXCLUDED.denials_total, refusals_total = EXCLUDED.refusals_total, updated_at = now()"""

INSERT_EPISODE = """
INSERT INTO core_degradation_episodes (episode_key, replica_id, host, pid, degraded_from, degraded_to, reason,
    checkpoints_buffered, writes_buffered, ops_resynced, resync_ms, denials)
VALUES (%(key)s, %(replica_id)s, %(host)s, %(pid)s, %(degraded_from)s, %(degraded_to)s, %(reason)s,
    %(checkpoints_buffered)s, %(writes_buffered)s, %(ops_resynced)s, %(resync_ms)s, %(denials)s)
ON CONFLICT (episode_key) DO NOTHING
RETURNING id"""

INSERT_DENIAL = """
INSERT INTO core_guard_denials (denial_key, episode_id, replica_id, tool, risk, thread_id, subject_root,
    subject_id, customer_id, reason, denied_at)
VALUES (%(key)s, %(episode_id)s, %(replica_id)s, %(tool)s, %(risk)s, %(thread_id)s, %(subject_root)s,
    %(subject_id)s, %(customer_id)s, %(reason)s, %(denied_at)s)
ON CONFLICT (denial_key) DO NOTHING"""

INSERT_REFUSAL = """
INSERT INTO core_serde_refusals (refusal_key, replica_id, type_name, kind, thread_id, checkpoint_id, refused_at)
VALUES (%(key)s, %(replica_id)s, %(type_name)s, %(kind)s, %(thread_id)s, %(checkpoint_id)s, %(refused_at)s)
ON CONFLICT (refusal_key) DO NOTHING"""


@dataclass
class Episode:
    """One degradation episode, as the saver closes it on recovery."""

    replica_id: str
    host: str
    pid: int
    degraded_from: datetime
    degraded_to: datetime
    reason: str | None
    checkpoints_buffered: int
    writes_buffered: int
    ops_resynced: int
    resync_ms: float
    denials: list[dict[str, Any]] = field(default_factory=list)  # GuardDenial.as_row() + "key"
    key: str = field(default_factory=lambda: str(uuid.uuid4()))  # makes a retried write a no-op


def _json_denial(row: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (v.isoformat() if isinstance(v, datetime) else v)
        for k, v in row.items()
        if k in ("tool", "risk", "thread_id", "customer_id", "subject_root", "subject_id", "denied_at")
    }


def publish_heartbeat(conn: psycopg.Connection[DictRow], row: dict[str, Any]) -> None:
    conn.execute(UPSERT_HEARTBEAT, row)


def write_episode(conn: psycopg.Connection[DictRow], episode: Episode) -> int | None:
    """Insert the episode and its denials in one transaction; returns the episode id.

    None when this episode was already written (a retry after a write that outlived its deadline).
    """
    with conn.transaction():
        params = {**episode.__dict__, "denials": Jsonb([_json_denial(d) for d in episode.denials])}
        row = conn.execute(INSERT_EPISODE, params).fetchone()
        if row is None:
            return None
        episode_id = row["id"] if isinstance(row, dict) else row[0]
        for denial in episode.denials:
            conn.execute(INSERT_DENIAL, {**_keyed(denial), "episode_id": episode_id, "replica_id": episode.replica_id})
    return episode_id


def _keyed(denial: dict[str, Any]) -> dict[str, Any]:
    return denial if "key" in denial else {**denial, "key": str(uuid.uuid4())}


def write_denials(conn: psycopg.Connection[DictRow], replica_id: str, denials: Sequence[dict[str, Any]]) -> None:
    """Denials recorded outside an episode (a call racing the recovery)."""
    with conn.transaction():
        for denial in denials:
            conn.execute(INSERT_DENIAL, {**_keyed(denial), "episode_id": None, "replica_id": replica_id})


def write_refusals(conn: psycopg.Connection[DictRow], replica_id: str, refusals: Sequence[Any]) -> None:
    with conn.transaction():
        for r in refusals:
            conn.execute(
                INSERT_REFUSAL,
                {
                    "key": r.key,
                    "replica_id": replica_id,
                    "type_name": r.qualified_name,
                    "kind": r.kind,
                    "thread_id": r.thread_id,
                    "checkpoint_id": r.checkpoint_id,
                    "refused_at": r.refused_at,
                },
            )


# --- read side (the Degradation page) -------------------------------------------------------

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
       (SELECT count(*) FROM core_refused_payloads)                                                  AS refused_in_sql,
       (SELECT updated_at FROM core_extract_watermark WHERE name = 'tool_calls')                     AS
       refused_scanned_at,
       (SELECT max(degraded_to) FROM core_degradation_episodes)                                      AS
       last_episode_end"""

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
        db.fetch(SELECT_REFUSED_IN_SQL, {"limit": limit}),
        columns=["found_at", "refused_type", "kind", "channel", "thread_id", "checkpoint_id"],
    )


def dead_letters(db: Database, limit: int = 500) -> pd.DataFrame:
    """Buffered operations PostgreSQL refused on replay (core_checkpoint_dead_letters), newest first."""
    return pd.DataFrame(
        db.fetch(SELECT_DEAD_LETTERS, {"limit": limit}),
        columns=["created_at", "replica_id", "thread_id", "kind", "error"],
    )


def summary(db: Database, since: datetime | None = None) -> dict[str, Any]:
    """Counts for the page's tiles: replicas, degraded, silent, episodes, denials, refusals."""
    return dict(db.fetch_one(SELECT_SUMMARY, {"since": since or EPOCH}) or {})
