"""EmbeddedServerControl.hang on a real embedded server: every process of the server is stopped, including a
backend forked while the hang begins. The suite once saw a replica never notice a hang (its liveness
connection, opened right before, kept answering) and the demo seed record 2 outage episodes instead of 3 (the
liveness check reconnects right after each outage, and the next hang follows): hang() listed the backends
before stopping the postmaster, so a backend forked meanwhile kept running."""

from __future__ import annotations

import threading
import time

import psutil
import psycopg
import pytest
from conftest import own_embedded_server

pytestmark = pytest.mark.slow  # an outage drill


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from own_embedded_server(tmp_path_factory, "outage-control")


def _running(postmaster: psutil.Process) -> list[tuple[int, str]]:
    """Processes of the server not stopped (the postmaster included)."""
    out = []
    for p in [postmaster] + postmaster.children(recursive=True):
        try:
            if p.status() not in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE):
                out.append((p.pid, p.status()))
        except psutil.NoSuchProcess:
            pass
    return out


def _connect_forever(dsn: str, stop: threading.Event) -> None:
    """New connections all the time, each kept open a while (a backend serving an open connection is what
    keeps answering if the hang misses it; a closed one just exits)."""
    held: list[psycopg.Connection] = []
    while not stop.is_set():  # every connection forks a backend
        try:
            held.append(psycopg.connect(dsn, connect_timeout=1))
        except psycopg.OperationalError:
            pass  # hung: the connect times out
        if len(held) > 5:
            held.pop(0).close()
    for conn in held:
        conn.close()


def test_hang_stops_every_backend_even_one_forked_as_it_begins(server):
    dsn, control = server
    stop = threading.Event()
    connectors = [threading.Thread(target=_connect_forever, args=(dsn, stop), daemon=True) for _ in range(4)]
    for t in connectors:
        t.start()
    try:
        for _ in range(30):
            control.hang()
            try:
                postmaster = psutil.Process(control.postmaster_pid())
                deadline = time.monotonic() + 2  # a signal is delivered asynchronously: give it time
                while (running := _running(postmaster)) and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert running == []
            finally:
                control.resume()
    finally:
        stop.set()
        for t in connectors:
            t.join(5)
