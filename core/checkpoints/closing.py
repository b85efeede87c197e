"""Closing with a buffer: a bounded final resync, else the local journal; the next start replays it."""
from __future__ import annotations

import logging
import time

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
        if self._buffer.degraded:
            self._final_resync()
        if not self._buffer.degraded and sh.publish_health:
            try:
                self._health.flush(state="stopped")
            except Exception as exc:  # closing must not fail because PostgreSQL is gone
                log.warning("last heartbeat not written: %s", _describe(exc))
        self._journal_unsaved()  # whatever PostgreSQL still lacks (nothing, normally)
        self._postgres.close()
        self._health.close()
        sh.watchdog.stop()

    def _final_resync(self) -> None:
        """Try to resync the buffer until `close_resync_timeout` has passed (monitor already stopped)."""
        sh = self._shared
        deadline = time.monotonic() + sh.close_resync_timeout
        while self._buffer.degraded and time.monotonic() < deadline:
            if self._try_recover():
                return
            time.sleep(min(sh.probe_interval, max(0.0, deadline - time.monotonic()), 0.2))

    def _journal_unsaved(self) -> None:
        """Append what PostgreSQL does not have yet (the resync log, the open episode, unflushed health
        rows) to the journal, fsynced, and say so at ERROR."""
        sh = self._shared
        episodes, denials = self._health.unsaved()
        open_episode = self._buffer.open_episode()
        if open_episode is not None:
            episodes.append(self._episode(open_episode, ops_resynced=0, resync_ms=0.0))
        record = self._buffer.closing_record(replica_id=sh.replica_id, episodes=[dict(e.__dict__) for e in episodes],
                                             denials=denials)
        if record is None:
            return
        what = (f"{record['checkpoints']} checkpoints, {record['writes']} writes, {len(record['ops'])} operations, "
                f"{len(record['episodes'])} degradation episodes, "
                f"{len(record['denials']) + sum(len(e['denials']) for e in record['episodes'])} guard denials")
        journal = self._buffer.journal_path
        try:
            self._buffer.journal(record)
        except Exception as exc:
            log.error("replica %s closed while PostgreSQL is unreachable: %s are LOST (journal %s not written: %s)",
                      sh.replica_id, what, journal, _describe(exc))
            return
        self._health.forget_unsaved()
        log.error("replica %s closed while PostgreSQL is unreachable: %s not saved to PostgreSQL; kept in the "
                  "journal %s, replayed by the next start of replica %s", sh.replica_id, what, journal, sh.replica_id)

    def _replay_journal(self) -> bool:
        """Replay the journal of this replica id, if any, then remove it; False if PostgreSQL refused."""
        sh = self._shared
        records = self._buffer.journaled()
        if not records:
            return True
        started = time.monotonic()
        try:
            for record in records:
                erased = self._recovery.replay(record["ops"], since=record["since"],
                                               tombstoned=self._buffer.tombstoned(), episode=False)
                self._buffer.learn_tombstones(erased)
        except Exception as exc:
            log.warning("journal %s of replica %s not replayed yet (kept, retried): %s", self._buffer.journal_path,
                        sh.replica_id, _describe(exc))
            return False
        for record in records:
            for episode in record["episodes"]:
                if episode["ops_resynced"] == 0:
                    episode["ops_resynced"] = len(record["ops"])
                    episode["resync_ms"] = (time.monotonic() - started) * 1000
                self._health.record_episode(replica_health.Episode(**episode))
            self._health.add_denials(record["denials"])
        self._recovery.journal_replayed(sum(len(r["ops"]) for r in records))
        self._buffer.journal_replayed()
        log.warning("replica %s replayed its journal: %d operations from %d closes while PostgreSQL was unreachable",
                    sh.replica_id, sum(len(r["ops"]) for r in records), len(records))
        if sh.publish_health:
            try:
                self._health.flush()
            except Exception as exc:  # kept in memory for the next heartbeat
                log.warning("health flush after the journal replay failed (kept for the next heartbeat): %s",
                            _describe(exc))
        return True
