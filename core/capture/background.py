"""The change follower as a daemon thread of the dashboard process (CAPTURE_FOLLOWER, the embedded default), like
the demo replicas: started once per process and database; across processes one follows at a time (the
follower's advisory lock), the others wait for it to go."""

from __future__ import annotations

import logging
import threading

from core.capture.follower import CaptureNotAllowed, Follower

log = logging.getLogger(__name__)

_threads: dict[str, tuple[threading.Thread, threading.Event]] = {}
_lock = threading.Lock()


def start_follower(dsn: str) -> threading.Event:
    """Start following `dsn` in a daemon thread unless this process already does; returns its stop event."""
    with _lock:
        running = _threads.get(dsn)
        if running is not None and running[0].is_alive():
            return running[1]
        stop = threading.Event()

        def run() -> None:
            try:
                Follower(dsn).run(stop=stop)
            except CaptureNotAllowed as exc:  # the pages say "unknown"; the log says why
                log.error("the change follower cannot run: %s", exc)
            except Exception:  # noqa: BLE001 - a daemon thread: logged, the pages show the follower as not running
                log.exception("the change follower stopped")

        thread = threading.Thread(target=run, name="capture-follower", daemon=True)
        _threads[dsn] = (thread, stop)
        thread.start()
        return stop


def stop_follower(dsn: str, timeout: float = 10.0) -> None:
    with _lock:
        running = _threads.pop(dsn, None)
    if running is not None:
        running[1].set()
        running[0].join(timeout)
