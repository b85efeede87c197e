"""Replay and recovery: the monitor that beats while healthy, probes while degraded, and resyncs."""
from __future__ import annotations

import logging
import threading
import time
from typing import Any

import psycopg
from langgraph.checkpoint.postgres.base import BasePostgresSaver
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from core.checkpoints import metrics, replica_health
from core.checkpoints.failures import PROBE_CONNECT_TIMEOUT_S, DeadlineExceeded, _describe, _now, is_connection_failure
from core.db import CONNECT_TIMEOUT_S, make_pool

log = logging.getLogger("core.checkpoints.dual_saver")


class Recovery:
    """Mixin of `DualCheckpointSaver`: the monitor thread, the probe and the resync of the buffer."""

    # --- monitor: heartbeat while healthy, probe + resync while degraded ---------------------

    def _monitor(self) -> None:
        sh = self._shared
        while not sh.stop.is_set():
            try:
                if sh.degraded:
                    if not self._try_recover():
                        sh.stop.wait(sh.probe_interval)
                    continue
                if sh.publish_health:
                    self._flush_health()
            except Exception as exc:
                if is_connection_failure(exc):
                    self._degrade(_describe(exc))
                    continue
                # E.g. the health tables are missing (migration 003 not applied): say it once, not every beat.
                message = _describe(exc)
                if message != getattr(self, "_last_monitor_error", None):
                    self._last_monitor_error = message
                    log.exception("dual saver monitor error (repeats are not logged)")
            sh.wake.wait(sh.heartbeat_interval)
            sh.wake.clear()

    def _try_recover(self) -> bool:
        sh = self._shared
        try:
            with sh.watchdog.deadline(PROBE_CONNECT_TIMEOUT_S + sh.call_timeout), \
                    psycopg.connect(sh.dsn, connect_timeout=PROBE_CONNECT_TIMEOUT_S, autocommit=True) as conn, \
                    sh.watchdog.watching(conn):
                conn.execute("SELECT 1")
        except (psycopg.Error, DeadlineExceeded):
            return False
        started = time.monotonic()
        with sh.lock:
            degraded_since = sh.degraded_since
        if sh.publish_health:
            try:  # tell the SRE page we are back and resyncing, with what we hold
                self._publish_heartbeat(state="degraded")
            except Exception as exc:
                log.info("heartbeat before resync not written: %s", _describe(exc))
        # Replay without the lock while agents keep buffering; committed ops leave the log.
        for _ in range(3):
            with sh.lock:
                batch = list(sh.ops)
            if len(batch) <= 50:
                break
            try:
                self._replay(batch)
            except Exception as exc:
                sh.last_resync_error = _describe(exc)
                log.warning("resync of %d buffered operations failed (kept): %s", len(batch), sh.last_resync_error)
                return False
            with sh.lock:
                del sh.ops[:len(batch)]
                sh.resynced_ops += len(batch)
        fresh = make_pool(sh.dsn, max_size=sh.pool_size, name=f"dual-saver-{sh.replica_id}")
        with sh.changed:
            try:  # the tail, under the lock so that nothing slips in between the replay and the switch
                self._replay(sh.ops)
            except Exception as exc:
                sh.last_resync_error = _describe(exc)
                log.warning("resync of %d buffered operations failed (kept): %s", len(sh.ops), sh.last_resync_error)
                fresh.close(timeout=0)
                return False
            sh.resynced_ops += len(sh.ops)
            old, old_health = sh.pool, sh.health_pool
            sh.pool = fresh
            sh.health_pool = make_pool(sh.dsn, max_size=1, name=f"dual-saver-health-{sh.replica_id}")
            sh.generation += 1
            resynced, sh.resynced_ops = sh.resynced_ops, 0
            sh.ops.clear()
            sh.memory.storage.clear()
            sh.memory.writes.clear()
            sh.memory.blobs.clear()
            sh.seeded = set()
            sh.degraded = False
            sh.last_success_ts = time.time()
            sh.last_resync_ms = (time.monotonic() - started) * 1000
            sh.last_resync_error = None
            sh.episodes_total += 1
            sh.pending_episodes.append(replica_health.Episode(
                replica_id=sh.replica_id, host=sh.host, pid=sh.pid, degraded_from=degraded_since or _now(),
                degraded_to=_now(), reason=sh.reason, checkpoints_buffered=sh.episode_checkpoints,
                writes_buffered=sh.episode_writes, ops_resynced=resynced, resync_ms=sh.last_resync_ms,
                denials=list(sh.episode_denials),
            ))
            sh.episode_denials = []
            sh.degraded_since = None
            sh.transitions.append((time.monotonic(), "healthy"))
            sh.changed.notify_all()
        for stale in (old, old_health):
            threading.Thread(target=stale.close, kwargs={"timeout": 2}, daemon=True).start()
        log.warning("checkpoint persistence RECOVERED (replica %s): %d operations resynced in %.0f ms",
                    sh.replica_id, resynced, sh.last_resync_ms)
        metrics.resynced(resynced, sh.last_resync_ms / 1000)
        if sh.publish_health:
            try:
                self._flush_health()
            except Exception as exc:
                log.info("health flush after recovery failed (kept for the next heartbeat): %s", _describe(exc))
        return True

    def _replay(self, ops: list[tuple[str, Any]]) -> None:
        """Write buffered operations in one transaction with PostgresSaver's own upsert statements.

        Consecutive puts/writes are sent as batches; a thread deletion flushes what came before it,
        so the result is that of the operations applied one by one, in order. Re-running it
        (after a failed commit, or over rows an abandoned call wrote meanwhile) changes nothing.
        """
        if not ops:
            return
        sh = self._shared
        sql = BasePostgresSaver

        def run() -> None:
            with psycopg.connect(sh.dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row,
                                 connect_timeout=CONNECT_TIMEOUT_S) as conn, sh.watchdog.watching(conn), \
                    conn.transaction():
                with conn.cursor() as cur:
                    blobs: list[tuple] = []
                    checkpoints: list[tuple] = []
                    upserts: list[tuple] = []
                    inserts: list[tuple] = []

                    def flush() -> None:
                        for statement, rows in ((sql.UPSERT_CHECKPOINT_BLOBS_SQL, blobs),
                                                (sql.UPSERT_CHECKPOINTS_SQL, checkpoints),
                                                (sql.UPSERT_CHECKPOINT_WRITES_SQL, upserts),
                                                (sql.INSERT_CHECKPOINT_WRITES_SQL, inserts)):
                            if rows:
                                cur.executemany(statement, rows)
                                rows.clear()

                    for kind, payload in ops:
                        if kind == "put":
                            blob_rows, (thread_id, ns, checkpoint_id, parent_id, inline, metadata) = payload
                            blobs.extend(blob_rows)
                            checkpoints.append((thread_id, ns, checkpoint_id, parent_id, Jsonb(inline), Jsonb(metadata)))
                        elif kind == "put_writes":
                            upsert, rows = payload
                            (upserts if upsert else inserts).extend(rows)
                        elif kind == "delete_thread":
                            flush()
                            for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
                                cur.execute(f"DELETE FROM {table} WHERE thread_id = %s", (payload,))
                        else:  # pragma: no cover - the log only holds the kinds above
                            raise ValueError(f"unknown buffered operation {kind!r}")
                    flush()

        with sh.watchdog.deadline(sh.resync_timeout):
            run()

