"""Closing with a buffer: a bounded final resync, else the local journal; the next start replays it."""
from __future__ import annotations

import logging
import time
from typing import Any

from core.checkpoints import metrics, replica_health
from core.checkpoints.failures import _describe

log = logging.getLogger("core.checkpoints.dual_saver")


class Closing:
    """Mixin of `DualCheckpointSaver`: `close()`, which drops nothing buffered (issue 16 #2)."""

    def close(self) -> None:
        """Stop the monitor, resync or journal the buffer, publish a last heartbeat, close the pools.

        Degraded, it tries a final resync for up to `close_resync_timeout` seconds; if PostgreSQL is
        still unreachable, the buffer goes to the local journal (`core.checkpoints.journal`, logged
        at ERROR), which the next start with the same replica id replays. Nothing is dropped.
        Closing twice is harmless.
        """
        sh = self._shared
        metrics.unregister(self)
        if sh.stop.is_set():
            return
        sh.stop.set()
        sh.wake.set()
        self._liveness.stop(timeout=sh.call_timeout + 2)
        if sh.monitor is not None:
            sh.monitor.join(timeout=sh.call_timeout + 2)
        if sh.degraded:
            self._final_resync()
        if not sh.degraded and sh.publish_health:
            try:
                self._health.flush(state="stopped")
            except Exception as exc:  # closing must not fail because PostgreSQL is gone
                log.warning("last heartbeat not written: %s", _describe(exc))
        self._journal_buffer()  # whatever PostgreSQL still lacks (nothing, normally)
        self._postgres.close()
        self._health.close()
        sh.watchdog.stop()

    def _final_resync(self) -> None:
        """Try to resync the buffer until `close_resync_timeout` has passed (monitor already stopped)."""
        sh = self._shared
        deadline = time.monotonic() + sh.close_resync_timeout
        while sh.degraded and time.monotonic() < deadline:
            if self._try_recover():
                return
            time.sleep(min(sh.probe_interval, max(0.0, deadline - time.monotonic()), 0.2))

    def _journal_record(self) -> dict[str, Any] | None:
        """What PostgreSQL does not have yet: the resync log, the open episode, unflushed health rows."""
        sh = self._shared
        with sh.lock:
            pending_episodes, pending_denials = self._health.unsaved()
            episodes = [dict(e.__dict__) for e in pending_episodes]
            if sh.degraded:
                episodes.append(dict(replica_health.Episode(
                    replica_id=sh.replica_id, host=sh.host, pid=sh.pid, degraded_from=sh.degraded_since or sh.now(),
                    degraded_to=sh.now(), reason=sh.reason, checkpoints_buffered=sh.episode_checkpoints,
                    writes_buffered=sh.episode_writes, ops_resynced=0, resync_ms=0.0,
                    denials=list(sh.episode_denials)).__dict__))
            record = {"replica_id": sh.replica_id, "since": sh.degraded_since, "ops": list(sh.ops) if sh.degraded else [],
                      "checkpoints": sh.episode_checkpoints if sh.degraded else 0,
                      "writes": sh.episode_writes if sh.degraded else 0,
                      "episodes": episodes, "denials": pending_denials}
        if not (record["ops"] or record["episodes"] or record["denials"]):
            return None
        return record

    def _journal_buffer(self) -> None:
        """Append what could not be saved to the journal (fsynced) and say so at ERROR."""
        sh = self._shared
        record = self._journal_record()
        if record is None:
            return
        what = (f"{record['checkpoints']} checkpoints, {record['writes']} writes, {len(record['ops'])} operations, "
                f"{len(record['episodes'])} degradation episodes, "
                f"{len(record['denials']) + sum(len(e['denials']) for e in record['episodes'])} guard denials")
        try:
            sh.journal.append(record)
        except Exception as exc:
            log.error("replica %s closed while PostgreSQL is unreachable: %s are LOST (journal %s not written: %s)",
                      sh.replica_id, what, sh.journal.path, _describe(exc))
            return
        with sh.lock:
            sh.ops.clear()
        self._health.forget_unsaved()
        log.error("replica %s closed while PostgreSQL is unreachable: %s not saved to PostgreSQL; kept in the "
                  "journal %s, replayed by the next start of replica %s", sh.replica_id, what, sh.journal.path,
                  sh.replica_id)

    def _replay_journal(self) -> bool:
        """Replay the journal of this replica id, if any, then remove it; False if PostgreSQL refused."""
        sh = self._shared
        records = sh.journal.read()
        if not records:
            return True
        started = time.monotonic()
        try:
            for record in records:
                with sh.lock:
                    tombstoned = frozenset(sh.tombstoned)
                self._learn_tombstones(list(self._recovery.replay(record["ops"], since=record["since"],
                                                                  tombstoned=tombstoned, episode=False)))
        except Exception as exc:
            log.warning("journal %s of replica %s not replayed yet (kept, retried): %s", sh.journal.path,
                        sh.replica_id, _describe(exc))
            sh.journal_pending = True
            return False
        with sh.lock:
            for record in records:
                for episode in record["episodes"]:
                    if episode["ops_resynced"] == 0:
                        episode["ops_resynced"] = len(record["ops"])
                        episode["resync_ms"] = (time.monotonic() - started) * 1000
                    self._health.record_episode(replica_health.Episode(**episode))
                self._health.add_denials(record["denials"])
        self._recovery.journal_replayed(sum(len(r["ops"]) for r in records))
        sh.journal.remove()
        sh.journal_pending = False
        log.warning("replica %s replayed its journal: %d operations from %d closes while PostgreSQL was unreachable",
                    sh.replica_id, sum(len(r["ops"]) for r in records), len(records))
        if sh.publish_health:
            try:
                self._health.flush()
            except Exception as exc:  # kept in memory for the next heartbeat
                log.warning("health flush after the journal replay failed (kept for the next heartbeat): %s",
                            _describe(exc))
        return True
