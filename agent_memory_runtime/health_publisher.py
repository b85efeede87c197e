"""Health publishing: this replica's heartbeat, and the episodes, denials and refusals kept until they are
written (agent_memory_runtime.replica_health); the erased threads learnt from the tombstones."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any

import psycopg
import psycopg.rows
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool

from agent_memory_runtime import replica_health
from agent_memory_runtime.deadlines import _Watchdog
from agent_memory_runtime.pool import CONNECT_TIMEOUT_S, make_pool, one
from agent_memory_runtime.serde import RefusalLog

TOMBSTONES_PRESENT_SQL = "SELECT to_regclass('core_thread_tombstones') IS NOT NULL AS present"
RECENT_TOMBSTONES_SQL = """
SELECT thread_id, erased_at FROM core_thread_tombstones
WHERE erased_at > coalesce(%s::timestamptz, now()) - interval '10 minutes'
"""


class HealthPublisher:
    """Writes what the SRE page reads, on a connection of its own (never queued behind the agents' calls).

    It keeps what is not written yet (episodes, denials, the serializer's refusals) and its totals;
    `live()` gives the saver's state for the heartbeat row (state, degraded_since, buffered counts,
    last_success). `watched()` says whether the liveness check runs: then a slow health write is no
    outage (bounded server-side, cut only if the check finds PostgreSQL gone); without it (closing),
    a health write has the `call_timeout` deadline.
    """

    def __init__(
        self,
        dsn: str,
        *,
        replica_id: str,
        host: str,
        pid: int,
        started_at: datetime,
        heartbeat_interval: float,
        call_timeout: float,
        watchdog: _Watchdog,
        watched: Callable[[], bool],
        live: Callable[[], dict[str, Any]],
    ):
        self._dsn = dsn
        self._replica_id = replica_id
        self._identity = {
            "replica_id": replica_id,
            "host": host,
            "pid": pid,
            "started_at": started_at,
            "heartbeat_interval_s": heartbeat_interval,
        }
        self._call_timeout = call_timeout
        self._watchdog = watchdog
        self._watched = watched
        self._live = live
        self._pool = self._new_pool()
        self._lock = threading.Lock()
        # Kept in memory until written to the health tables.
        self._episodes: list[replica_health.Episode] = []
        self._denials: list[dict[str, Any]] = []
        self._refusal_logs: dict[int, RefusalLog] = {}
        self._tombstones_since: datetime | None = None  # erased_at of the newest tombstone seen
        self.last_success_ts: float | None = None  # time.time() of the last health call that reached PostgreSQL
        # Monotonic counters (never reset while the process lives).
        self._episodes_total = 0
        self._denials_total = 0
        self._denials_by: dict[tuple[str, str], int] = {}
        self._refusals_total = 0
        self._refusals_by_type: dict[str, int] = {}

    def _new_pool(self) -> ConnectionPool[psycopg.Connection[DictRow]]:
        return make_pool(self._dsn, max_size=1, name=f"dual-saver-health-{self._replica_id}")

    # --- what it keeps --------------------------------------------------------------------------

    def count_denial(self, row: dict[str, Any]) -> None:
        with self._lock:
            self._denials_total += 1
            by = (str(row.get("tool")), str(row.get("risk")))
            self._denials_by[by] = self._denials_by.get(by, 0) + 1

    def add_denials(self, rows: list[dict[str, Any]]) -> None:
        """Guard denials to write to core_guard_denials (those of no degradation episode)."""
        with self._lock:
            self._denials.extend(rows)

    def record_episode(self, episode: replica_health.Episode) -> None:
        with self._lock:
            self._episodes.append(episode)
            self._episodes_total += 1

    def watch_refusals(self, refusals: RefusalLog) -> None:
        """Write this serializer's refusals too."""
        with self._lock:
            self._refusal_logs[id(refusals)] = refusals

    def unsaved(self) -> tuple[list[replica_health.Episode], list[dict[str, Any]]]:
        """The episodes and denials not written yet (for the journal of a close while PostgreSQL is gone)."""
        with self._lock:
            return list(self._episodes), list(self._denials)

    def forget_unsaved(self) -> None:
        """They are in the journal now."""
        with self._lock:
            self._episodes.clear()
            self._denials.clear()

    def totals(self) -> dict[str, Any]:
        with self._lock:
            return {
                "episodes_total": self._episodes_total,
                "denials_total": self._denials_total,
                "refusals_total": self._refusals_total,
                "denials_by": [{"tool": t, "risk": r, "total": n} for (t, r), n in sorted(self._denials_by.items())],
                "refusals_by_type": dict(sorted(self._refusals_by_type.items())),
            }

    # --- writing ----------------------------------------------------------------------------------

    def _heartbeat_row(self, state: str | None) -> dict[str, Any]:
        live = self._live()
        with self._lock:
            totals = {
                "episodes_total": self._episodes_total,
                "denials_total": self._denials_total,
                "refusals_total": self._refusals_total,
            }
        degraded = live["state"] == "degraded"
        return {
            **self._identity,
            **totals,
            "state": state or ("degraded" if degraded else "healthy"),
            "degraded_since": live["degraded_since"],
            "buffered_checkpoints": live["buffered_checkpoints"] if degraded else 0,
            "buffered_writes": live["buffered_writes"] if degraded else 0,
            "last_success": live["last_success"],
        }

    def _with_conn(self, fn: Callable[[psycopg.Connection[DictRow]], Any]) -> Any:
        """Run `fn` on the health connection (see the class: its deadline depends on `watched()`)."""
        with (
            self._watchdog.deadline(None if self._watched() else self._call_timeout),
            self._pool.connection(timeout=self._call_timeout) as conn,
            self._watchdog.watching(conn),
        ):
            result = fn(conn)
        self.last_success_ts = time.time()
        return result

    def poll_tombstones(self) -> list[str]:
        """The threads erased since the last poll (overlapping: an erasure commits after it began)."""
        since = self._tombstones_since

        def read(conn: psycopg.Connection[DictRow]) -> list[tuple[str, Any]]:
            with conn.cursor(row_factory=psycopg.rows.tuple_row) as cur:
                if not one(cur.execute(TOMBSTONES_PRESENT_SQL).fetchone())[0]:
                    return []  # migration 010 not applied: nothing to learn
                return cur.execute(RECENT_TOMBSTONES_SQL, (since,)).fetchall()

        rows = self._with_conn(read)
        if not rows:
            return []
        self._tombstones_since = max(r[1] for r in rows)
        return [r[0] for r in rows]

    def publish_heartbeat(self, state: str) -> None:
        """The heartbeat alone, on a direct connection (before a resync, when the pool may still be broken)."""
        row = self._heartbeat_row(state)
        with (
            self._watchdog.deadline(self._call_timeout),
            psycopg.connect(
                self._dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, row_factory=dict_row
            ) as conn,
            self._watchdog.watching(conn),
        ):
            replica_health.publish_heartbeat(conn, row)

    def flush(self, state: str | None = None) -> None:
        """Write pending episodes, denials and refusals, then the heartbeat. Keeps what fails."""
        with self._lock:
            episodes, self._episodes = self._episodes, []
            denials, self._denials = self._denials, []
            logs = list(self._refusal_logs.values())
        refusals = [(refusal_log, refusal_log.drain()) for refusal_log in logs]
        try:
            while episodes:
                self._with_conn(lambda conn: replica_health.write_episode(conn, episodes[0]))
                episodes.pop(0)
            if denials:
                self._with_conn(lambda conn: replica_health.write_denials(conn, self._replica_id, denials))
                denials = []
            while refusals:
                refusal_log, items = refusals[0]
                if items:
                    self._with_conn(partial(replica_health.write_refusals, replica_id=self._replica_id, refusals=items))
                    with self._lock:
                        self._refusals_total += len(items)
                        for item in items:
                            name = item.qualified_name
                            self._refusals_by_type[name] = self._refusals_by_type.get(name, 0) + 1
                refusals.pop(0)
        finally:
            if episodes or denials or refusals:  # not written: back in memory for the next flush
                with self._lock:
                    self._episodes[:0] = episodes
                    self._denials[:0] = denials
                for refusal_log, items in refusals:
                    refusal_log.restore(items)
        row = self._heartbeat_row(state)
        self._with_conn(lambda conn: replica_health.publish_heartbeat(conn, row))

    # --- its connection ---------------------------------------------------------------------------

    def reconnect(self) -> None:
        """A fresh pool after an outage (the pool's own reconnect backoff takes tens of seconds)."""
        old, self._pool = self._pool, self._new_pool()
        threading.Thread(target=old.close, kwargs={"timeout": 2}, daemon=True).start()

    def close(self) -> None:
        self._pool.close(timeout=1)
