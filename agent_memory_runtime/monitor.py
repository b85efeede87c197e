"""The dual saver's background thread: it beats while the saver is healthy and recovers while it is degraded.

What a beat and a recovery do is the saver's business (it routes them to its collaborators); this is
when they run, and what happens to their errors.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from agent_memory_runtime.failures import _describe, is_connection_failure

log = logging.getLogger("agent_memory_runtime.dual_saver")


class Monitor:
    """While healthy, `beat()` every `heartbeat_interval` (sooner when woken); while degraded,
    `recover()` at once and then every `probe_interval` until it returns True.

    A connection failure raised by a beat means PostgreSQL is gone (`on_gone`); any other error (e.g.
    the health tables are missing, migration 003 not applied) is logged once while it lasts, not
    every beat, and again if it comes back after it cleared.
    """

    def __init__(
        self,
        *,
        replica_id: str,
        heartbeat_interval: float,
        probe_interval: float,
        is_degraded: Callable[[], bool],
        beat: Callable[[], None],
        recover: Callable[[], bool],
        on_gone: Callable[[str], None],
    ):
        self._replica_id = replica_id
        self._heartbeat_interval = heartbeat_interval
        self._probe_interval = probe_interval
        self._is_degraded = is_degraded
        self._beat = beat
        self._recover = recover
        self._on_gone = on_gone
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_error: str | None = None

    @property
    def stopped(self) -> bool:
        """`stop()` was called (and no `start()` since)."""
        return self._stop.is_set()

    def start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._loop, name=f"dual-saver-monitor-{self._replica_id}", daemon=True
            )
            self._thread.start()

    def wake(self) -> None:
        """Beat or recover now (the saver just degraded)."""
        self._wake.set()

    def stop(self, timeout: float) -> None:
        """End the thread (waits up to `timeout` s for a beat or a recovery in progress)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self._is_degraded():
                    if not self._recover():
                        self._stop.wait(self._probe_interval)
                    continue
                self._beat()
                if self._last_error is not None:
                    log.warning(
                        "dual saver monitor of replica %s works again (was: %s)", self._replica_id, self._last_error
                    )
                    self._last_error = None  # cleared: the next error is logged again
            except Exception as exc:
                if is_connection_failure(exc):
                    self._on_gone(_describe(exc))
                    continue
                message = _describe(exc)
                if message != self._last_error:
                    self._last_error = message
                    log.exception("dual saver monitor error (repeats are not logged until it clears)")
            self._wake.wait(self._heartbeat_interval)
            self._wake.clear()
