"""Replay and recovery: the monitor that beats while healthy, probes while degraded, and resyncs."""
from __future__ import annotations

import logging
import time
from typing import Any

import psycopg
from langgraph.checkpoint.postgres.base import BasePostgresSaver
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from core.checkpoints import metrics, replica_health
from core.checkpoints.thread_fates import ThreadFates
from core.checkpoints.failures import PROBE_CONNECT_TIMEOUT_S, PROBE_LOG_EVERY_S, DeadlineExceeded, _describe, is_connection_failure
from core.db import CONNECT_TIMEOUT_S

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
                if sh.journal_pending:
                    self._replay_journal()
                self._learn_tombstones(self._health.poll_tombstones())
                if sh.publish_health:
                    self._health.flush()
                if sh.last_monitor_error is not None:
                    log.warning("dual saver monitor of replica %s works again (was: %s)", sh.replica_id,
                                sh.last_monitor_error)
                    sh.last_monitor_error = None  # cleared: the next error is logged again
            except Exception as exc:
                if is_connection_failure(exc):
                    self._degrade(_describe(exc))
                    continue
                # E.g. the health tables are missing (migration 003 not applied): said once while it
                # lasts, not every beat, and again if it comes back after it cleared.
                message = _describe(exc)
                if message != sh.last_monitor_error:
                    sh.last_monitor_error = message
                    log.exception("dual saver monitor error (repeats are not logged until it clears)")
            sh.wake.wait(sh.heartbeat_interval)
            sh.wake.clear()

    def _try_recover(self) -> bool:
        sh = self._shared
        try:
            with sh.watchdog.deadline(PROBE_CONNECT_TIMEOUT_S + sh.call_timeout), \
                    psycopg.connect(sh.dsn, connect_timeout=PROBE_CONNECT_TIMEOUT_S, autocommit=True) as conn, \
                    sh.watchdog.watching(conn):
                conn.execute("SELECT 1")
        except (psycopg.Error, DeadlineExceeded) as exc:
            # Once per episode and cause, then every PROBE_LOG_EVERY_S: visible, not one line per probe.
            message, now = _describe(exc), time.monotonic()
            if message != sh.last_probe_error or now - sh.last_probe_logged >= PROBE_LOG_EVERY_S:
                sh.last_probe_error, sh.last_probe_logged = message, now
                log.warning("replica %s: PostgreSQL probe failed, still degraded (since %s, %d operations buffered): %s",
                            sh.replica_id, sh.degraded_since, len(sh.ops), message)
            return False
        sh.last_probe_error = None
        if sh.journal_pending and not self._replay_journal():  # older than this episode: first
            return False
        started = time.monotonic()
        with sh.lock:
            degraded_since = sh.degraded_since
        if sh.publish_health:
            try:  # tell the SRE page we are back and resyncing, with what we hold
                self._health.publish_heartbeat("degraded")
            except Exception as exc:
                log.warning("heartbeat before resync not written: %s", _describe(exc))
        # Replay without the shared lock while agents keep buffering, reading and checking status
        # (issue 16 #4): each round writes what the log held when it started; committed ops leave the
        # log. Once a round finds the log empty, the switch happens under the lock with no I/O.
        with sh.lock:
            sh.resyncing = True
        try:
            while True:
                with sh.lock:
                    batch = list(sh.ops)
                if batch:
                    if time.monotonic() - started > sh.resync_timeout:
                        # Agents buffer faster than the rounds drain: stay degraded, retry at the next probe.
                        sh.last_resync_error = f"buffer not drained within {sh.resync_timeout:.0f} s"
                        log.warning("resync of replica %s did not drain the buffer within %.0f s (%d operations "
                                    "left, kept)", sh.replica_id, sh.resync_timeout, len(batch))
                        return False
                    try:
                        self._replay(batch)
                    except Exception as exc:
                        sh.last_resync_error = _describe(exc)
                        log.warning("resync of %d buffered operations failed (kept): %s", len(batch),
                                    sh.last_resync_error)
                        return False
                    with sh.lock:
                        del sh.ops[:len(batch)]
                        sh.resynced_ops += len(batch)
                    continue
                # Fresh pools first (agents use none while degraded), then the switch, with no I/O under the lock.
                self._postgres.reconnect()
                self._health.reconnect()
                with sh.changed:
                    if sh.ops:  # buffered since the last round: one more round
                        continue
                    sh.resyncing = False
                    resynced, sh.resynced_ops = sh.resynced_ops, 0
                    sh.ops.clear()
                    sh.memory.storage.clear()
                    sh.memory.writes.clear()
                    sh.memory.blobs.clear()
                    sh.seeded = set()
                    sh.fates = {}
                    sh.degraded = False
                    sh.last_resync_ms = (time.monotonic() - started) * 1000
                    sh.resynced_ops_total += resynced
                    sh.resyncs_total += 1
                    sh.resync_seconds_total += sh.last_resync_ms / 1000
                    sh.last_resync_error = None
                    self._health.record_episode(replica_health.Episode(
                        replica_id=sh.replica_id, host=sh.host, pid=sh.pid, degraded_from=degraded_since or sh.now(),
                        degraded_to=sh.now(), reason=sh.reason, checkpoints_buffered=sh.episode_checkpoints,
                        writes_buffered=sh.episode_writes, ops_resynced=resynced, resync_ms=sh.last_resync_ms,
                        denials=list(sh.episode_denials),
                    ))
                    sh.episode_denials = []
                    sh.degraded_since = None
                    sh.transitions.append((time.monotonic(), "healthy"))
                    sh.changed.notify_all()
                break
        finally:
            with sh.lock:
                sh.resyncing = False
        log.warning("checkpoint persistence RECOVERED (replica %s): %d operations resynced in %.0f ms",
                    sh.replica_id, resynced, sh.last_resync_ms)
        metrics.resynced(resynced, sh.last_resync_ms / 1000)
        if sh.publish_health:
            try:
                self._health.flush()
            except Exception as exc:
                log.warning("health flush after recovery failed (kept for the next heartbeat): %s", _describe(exc))
        return True

    def _replay(self, ops: list[tuple[str, Any]], *, since: Any = None, episode: bool = True) -> None:
        """Write buffered operations in one transaction with PostgresSaver's own upsert statements.

        Consecutive puts/writes are sent as batches; a thread deletion flushes what came before it,
        so the result is that of the operations applied one by one, in order. Re-running it
        (after a failed commit, or over rows an abandoned call wrote meanwhile) changes nothing.
        `episode=False` (a journal from an earlier run, degraded since `since`) keeps its thread fates apart.

        Before the first buffered checkpoint of a thread (this episode) it checks the thread in
        PostgreSQL (`threads.ThreadFates`): an erased thread (tombstone) is dropped; a thread whose
        head is not the checkpoint the buffered turns were based on (another replica wrote it, or
        this replica never knew it) is written to a conflict thread instead of on top of the head.
        """
        if not ops:
            return
        sh = self._shared
        sql = BasePostgresSaver
        fates = ThreadFates(sh, ops, since=since, episode=episode)

        def run() -> None:
            with psycopg.connect(sh.resync_dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row,
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
                            target = fates.target(cur, thread_id, ns, parent_id)
                            if target is None:
                                continue
                            blobs.extend((target, *row[1:]) for row in blob_rows)
                            checkpoints.append((target, ns, checkpoint_id, parent_id, Jsonb(inline), Jsonb(metadata)))
                        elif kind == "put_writes":
                            upsert, rows = payload
                            if not rows:
                                continue
                            target = fates.target(cur, rows[0][0], rows[0][1], None, writes=True)
                            if target is None:
                                continue
                            (upserts if upsert else inserts).extend((target, *row[1:]) for row in rows)
                        elif kind == "delete_thread":
                            flush()
                            for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
                                cur.execute(f"DELETE FROM {table} WHERE thread_id = %s", (payload,))
                            fates.deleted(payload)
                        else:  # pragma: no cover - the log only holds the kinds above
                            raise ValueError(f"unknown buffered operation {kind!r}")
                    flush()

        with sh.watchdog.deadline(sh.resync_timeout):
            run()
        fates.commit()
