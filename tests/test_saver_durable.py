"""Issue 25, the dual saver under process death and bad data: a real agent process killed mid-outage,
torn journals, a bad buffered write. On an embedded server of its own (stopped and started)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from conftest import own_embedded_server
from core.migrate import migrate
from test_saver_findings import DIMS, head

pytestmark = pytest.mark.slow  # outage drills and agent processes

ROOT = Path(__file__).resolve().parents[1]

# A real agent: one turn per line of stdin ("<thread> <text>"), answered with "<text> degraded|healthy".
AGENT = """
import sys
sys.path.insert(0, "tests")
from core.checkpoints.dual_saver import DualCheckpointSaver
from test_saver_findings import graph, turn
saver = DualCheckpointSaver(sys.argv[1], heartbeat_interval=0.3, probe_interval=0.2, replica_id=sys.argv[2])
app = graph(saver)
print("ready", flush=True)
for line in sys.stdin:
    thread, text = line.split()
    turn(app, thread, text)
    print(text, "degraded" if saver.degraded else "healthy", flush=True)
saver.close()
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from own_embedded_server(tmp_path_factory, "saver-durable")


@pytest.fixture
def dsn(server):
    base, control = server
    control.resume()
    name = f"sd_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    out = psycopg.conninfo.make_conninfo(base, dbname=name)
    migrate(out, DIMS)
    return out


@pytest.fixture
def control(server):
    return server[1]


class Agent:
    def __init__(self, dsn: str, replica_id: str, journal_dir: Path):
        env = {**os.environ, "DUAL_SAVER_JOURNAL_DIR": str(journal_dir)}
        self.proc = subprocess.Popen([sys.executable, "-c", AGENT, dsn, replica_id], cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def turn(self, thread: str, text: str) -> str:
        self.proc.stdin.write(f"{thread} {text}\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def kill(self, sig: int) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(30)


def wait_until(check, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_an_agent_killed_mid_outage_loses_no_turn(dsn, control, tmp_path, sig):
    """Turns buffered while PostgreSQL is down survive a SIGKILL (write-ahead journal) or a SIGTERM (close())
    of the agent process; its restart with the same replica id writes every turn to PostgreSQL."""
    agent = Agent(dsn, "durable-1", tmp_path / "journal")
    try:
        assert agent.turn("wal", "t1") == "t1 healthy"
        control.stop()
        try:
            assert agent.turn("wal", "t2") == "t2 degraded"
            assert agent.turn("wal-new", "n1") == "n1 degraded"
            assert agent.turn("wal", "t3") == "t3 degraded"
            agent.kill(sig)
        finally:
            control.start()
        assert head(dsn, "wal") == ["t1", "node"]  # the killed agent wrote nothing more
        again = Agent(dsn, "durable-1", tmp_path / "journal")
        try:
            assert wait_until(lambda: head(dsn, "wal") == ["t1", "node", "t2", "node", "t3", "node"], 30), \
                head(dsn, "wal")
            assert head(dsn, "wal-new") == ["n1", "node"]
            assert again.turn("wal", "t4") == "t4 healthy"
        finally:
            again.stop()
        assert head(dsn, "wal") == ["t1", "node", "t2", "node", "t3", "node", "t4", "node"]
        assert not list((tmp_path / "journal").glob("*.journal*"))
    finally:
        agent.stop()
