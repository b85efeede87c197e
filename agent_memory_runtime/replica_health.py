"""Replica health: what each process running the dual saver writes.

Written by `agent_memory_runtime.dual_saver.DualCheckpointSaver` (heartbeat every few seconds while PostgreSQL
is reachable; on recovery the degradation episode, the guard's denials and the serializer's
refusals kept in memory during the outage). The dashboard reads it back in core.history.replica_health.
Tables: migration 003_replica_health.sql.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

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
