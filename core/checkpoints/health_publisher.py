"""Health publishing: this replica's heartbeat, episodes, denials and refusals (core.checkpoints.replica_health)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import time

import psycopg
import psycopg.rows

from core.checkpoints import replica_health
from core.checkpoints.failures import _ts
from core.db import CONNECT_TIMEOUT_S


TOMBSTONES_PRESENT_SQL = "SELECT to_regclass('core_thread_tombstones') IS NOT NULL AS present"
RECENT_TOMBSTONES_SQL = """
SELECT thread_id, erased_at FROM core_thread_tombstones
WHERE erased_at > coalesce(%s::timestamptz, now()) - interval '10 minutes'
"""


class HealthPublisher:
    """Mixin of `DualCheckpointSaver`: writes what the SRE page reads."""

    # --- health publishing --------------------------------------------------------------------

    def _heartbeat_row(self, state: str) -> dict[str, Any]:
        sh = self._shared
        with sh.lock:
            return {
                "replica_id": sh.replica_id, "host": sh.host, "pid": sh.pid, "state": state,
                "degraded_since": sh.degraded_since, "buffered_checkpoints": sh.episode_checkpoints if sh.degraded else 0,
                "buffered_writes": sh.episode_writes if sh.degraded else 0, "last_success": _ts(max(filter(None, (sh.last_success_ts, self._postgres.last_success_ts)), default=None)),
                "started_at": sh.started_at, "heartbeat_interval_s": sh.heartbeat_interval,
                "episodes_total": sh.episodes_total, "denials_total": sh.denials_total,
                "refusals_total": sh.refusals_total,
            }

    def _with_health_conn(self, fn: Callable[[psycopg.Connection], Any]) -> Any:
        """Run `fn` on the health connection. While the liveness check runs, a slow health write is
        no outage (bounded server-side, cut only if the check finds PostgreSQL gone); without it
        (closing), it has the `call_timeout` deadline."""
        sh = self._shared
        watched = self._liveness.running
        with sh.watchdog.deadline(None if watched else sh.call_timeout), \
                sh.health_pool.connection(timeout=sh.call_timeout) as conn, sh.watchdog.watching(conn):
            result = fn(conn)
        sh.last_success_ts = time.time()
        return result

    def _poll_tombstones(self) -> None:
        """Learn the threads erased since the last poll (overlapping: an erasure commits after it began)."""
        sh = self._shared

        def read(conn: psycopg.Connection) -> list[tuple[str, Any]]:
            with conn.cursor(row_factory=psycopg.rows.tuple_row) as cur:
                if not cur.execute(TOMBSTONES_PRESENT_SQL).fetchone()[0]:
                    return []  # migration 010 not applied: nothing to learn
                return cur.execute(RECENT_TOMBSTONES_SQL, (sh.tombstones_since,)).fetchall()

        rows = self._with_health_conn(read)
        if rows:
            self._learn_tombstones([r[0] for r in rows])
            sh.tombstones_since = max(r[1] for r in rows)

    def _publish_heartbeat(self, state: str) -> None:
        sh = self._shared
        row = self._heartbeat_row(state)

        with sh.watchdog.deadline(sh.call_timeout), \
                psycopg.connect(sh.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn, \
                sh.watchdog.watching(conn):
            replica_health.publish_heartbeat(conn, row)

    def _flush_health(self, state: str | None = None) -> None:
        """Write pending episodes, denials and refusals, then the heartbeat. Keeps what fails."""
        sh = self._shared
        with sh.lock:
            episodes, sh.pending_episodes = sh.pending_episodes, []
            denials, sh.pending_denials = sh.pending_denials, []
            logs = list(sh.refusal_logs.values())
        refusals = [(refusal_log, refusal_log.drain()) for refusal_log in logs]
        try:
            while episodes:
                self._with_health_conn(lambda conn: replica_health.write_episode(conn, episodes[0]))
                episodes.pop(0)
            if denials:
                self._with_health_conn(lambda conn: replica_health.write_denials(conn, sh.replica_id, denials))
                denials = []
            while refusals:
                refusal_log, items = refusals[0]
                if items:
                    self._with_health_conn(lambda conn: replica_health.write_refusals(conn, sh.replica_id, items))
                    with sh.lock:
                        sh.refusals_total += len(items)
                        for item in items:
                            sh.refusals_by_type[item.qualified_name] = sh.refusals_by_type.get(item.qualified_name, 0) + 1
                refusals.pop(0)
        finally:
            if episodes or denials or refusals:  # not written: back in memory for the next flush
                with sh.lock:
                    sh.pending_episodes[:0] = episodes
                    sh.pending_denials[:0] = denials
                for refusal_log, items in refusals:
                    refusal_log.restore(items)
        row = self._heartbeat_row(state or ("degraded" if sh.degraded else "healthy"))
        self._with_health_conn(lambda conn: replica_health.publish_heartbeat(conn, row))
