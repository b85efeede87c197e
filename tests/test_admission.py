"""Admission control for expensive reads (issue 41 #3): a bounded number at a time per process, the others in line
first come first served and told their place, a caller that leaves the line frees its place, and each read runs under
a statement timeout (past it: DatabaseSlow, and the pooled connection goes back without it)."""

from __future__ import annotations

import threading

import pytest
from apptools import wait_until

from core.admission import Admission
from core.db import DatabaseSlow, failure_counts


class Left(BaseException):
    """What Streamlit raises in a waiting script whose page was left (StopException is a BaseException too)."""


def test_at_most_its_slots_at_a_time_the_others_in_line_with_their_place():
    admission = Admission(2)
    release = threading.Event()
    inside, most, places = [0], [0], {}
    lock = threading.Lock()

    def caller(name: str) -> None:
        with admission.slot(on_wait=lambda place: places.setdefault(name, []).append(place)):
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            release.wait(30)
            with lock:
                inside[0] -= 1

    threads = []
    for i, name in enumerate("abcde"):
        threads.append(threading.Thread(target=caller, args=(name,)))
        threads[-1].start()
        wait_until(lambda n=i + 1: admission.active + admission.waiting == n)  # in line in this order
    wait_until(lambda: all(name in places for name in "cde"))
    assert admission.active == 2 and admission.waiting == 3
    assert [places[n][0] for n in "cde"] == [1, 2, 3] and "a" not in places and "b" not in places
    release.set()
    for thread in threads:
        thread.join(30)
    assert most[0] == 2 and admission.active == 0 and admission.waiting == 0


def test_a_caller_leaving_the_line_frees_its_place():
    admission = Admission(1)
    release, leave = threading.Event(), threading.Event()
    places: dict[str, list[int]] = {}

    def holder() -> None:
        with admission.slot():
            release.wait(30)

    def waiter(name: str) -> None:
        def on_wait(place: int) -> None:
            places.setdefault(name, []).append(place)
            if name == "left" and leave.is_set():
                raise Left

        try:
            with admission.slot(on_wait=on_wait):
                pass
        except Left:
            pass

    threads = [threading.Thread(target=holder)]
    threads[0].start()
    wait_until(lambda: admission.active == 1)
    for name in ("left", "next"):
        threads.append(threading.Thread(target=waiter, args=(name,)))
        threads[-1].start()
        wait_until(lambda n=name: n in places)
    assert places["next"][-1] == 2
    leave.set()  # the first in line leaves its page
    wait_until(lambda: places["next"][-1] == 1)  # the next one moved up
    assert admission.waiting == 1
    release.set()
    for thread in threads:
        thread.join(30)
    assert admission.active == 0 and admission.waiting == 0


def test_an_expensive_read_runs_under_its_statement_timeout_and_leaves_none_behind(db):
    slow = failure_counts()["slow"]
    with pytest.raises(DatabaseSlow, match="too slowly"):
        db.with_statement_timeout(200).fetch("SELECT pg_sleep(3)")
    assert failure_counts()["slow"] == slow + 1
    for _ in range(3):  # the pool's connections read without it again
        assert db.fetch_one("SHOW statement_timeout")["statement_timeout"] == "0"
        db.fetch("SELECT pg_sleep(0.4)")  # longer than the 200 ms above


def test_bad_slots_are_refused():
    with pytest.raises(ValueError, match="slots must be >= 1"):
        Admission(0)
