"""ui.shared.SharedReading: one reading per interval for every session of the process, and never a stale "ok"."""

from __future__ import annotations

import threading
import time

from ui.shared import SharedReading


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_read_per_interval_for_every_caller():
    clock, calls = Clock(), []
    shared = SharedReading(lambda: calls.append(1) or len(calls), 15, wait_s=1, clock=clock)
    assert [shared.get().value for _ in range(50)] == [1] * 50
    clock.now += 14.9
    assert shared.get().value == 1 and len(calls) == 1
    clock.now += 0.1  # the interval is over: read again
    assert shared.get().value == 2 and len(calls) == 2


def test_unknown_when_the_read_fails_even_though_the_previous_one_was_ok():
    clock, answers = Clock(), iter(["ok"])

    def read() -> str:
        try:
            return next(answers)
        except StopIteration:
            raise ConnectionError("server closed the connection") from None

    shared = SharedReading(read, 15, wait_s=1, clock=clock)
    assert shared.get().value == "ok"
    clock.now += 15
    failed = shared.get()
    assert failed.unknown and failed.value is None and failed.error == "server closed the connection"
    # the failure is shared for its interval (a dead server is not asked once per session), still unknown
    clock.now += 1
    assert shared.get() is failed


def test_unknown_when_another_sessions_read_hangs():
    """A hung server: the session that reads waits; the others, once the last reading is past its interval,
    get unknown after wait_s, never the old ok."""
    clock, release, reads = Clock(), threading.Event(), []

    def read() -> str:
        reads.append(1)
        if len(reads) == 2:
            release.wait(10)
        return "ok"

    shared = SharedReading(read, 5, wait_s=0.3, clock=clock)
    assert shared.get().value == "ok"
    clock.now += 5
    hung = threading.Thread(target=shared.get)
    hung.start()
    while len(reads) < 2:
        time.sleep(0.01)
    started = time.monotonic()
    other = shared.get()
    assert other.unknown and "no answer in 0.3 s" in other.error
    assert 0.25 < time.monotonic() - started < 2
    release.set()
    hung.join()
    assert shared.get().value == "ok" and len(reads) == 2


def test_the_age_counts_from_before_a_slow_read():
    clock = Clock()

    def slow() -> str:
        clock.now += 4  # the read itself took 4 s of the 5 s interval
        return "ok"

    shared = SharedReading(slow, 5, wait_s=1, clock=clock)
    shared.get()
    clock.now += 1.0  # 5 s after the read began: expired
    shared.get()
    assert clock.now == 1000 + 4 + 1 + 4
