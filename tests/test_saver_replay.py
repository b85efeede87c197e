"""Issue 43 #2 and issue 42 #3: a replayed journal never undoes what another replica wrote after it, and never
applies an operation twice. Real replica processes (the real dual saver) killed mid-outage and mid-resync, on an
embedded server of their own, stopped and started for the outage."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from conftest import own_embedded_server
from test_saver_durable import journal_files, wait_until
from test_saver_findings import DIMS, head, threads_like

from agent_memory_runtime.dual_saver import DualCheckpointSaver
from agent_memory_runtime.journal import Journal
from core.migrate import migrate

pytestmark = pytest.mark.slow  # outage drills and replica processes

ROOT = Path(__file__).resolve().parents[1]

# A real replica: one command per line of stdin, "turn <thread> <text>", "delete <thread>" or "status -" (does
# nothing), answered with "<command> degraded|healthy". argv[3] names a Journal method at which the process
# SIGKILLs itself (or "-"): the crash lands exactly there.
REPLICA = """
import logging, os, signal, sys
logging.basicConfig(format="%(levelname)s %(name)s %(message)s")
sys.path.insert(0, "tests")
from agent_memory_runtime.dual_saver import DualCheckpointSaver
from agent_memory_runtime.journal import Journal
from turns_graph import graph, turn
dsn, replica_id, crash_at = sys.argv[1:4]
if crash_at != "-":
    setattr(Journal, crash_at, lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL))
saver = DualCheckpointSaver(dsn, heartbeat_interval=0.3, probe_interval=0.2, replica_id=replica_id)
app = graph(saver)
print("ready", flush=True)
for line in sys.stdin:
    command, thread, *text = line.split()
    if command == "status":
        pass
    elif command == "delete":
        saver.delete_thread(thread)
    else:
        turn(app, thread, text[0])
    print(command, "degraded" if saver.degraded else "healthy", flush=True)
saver.close()
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from own_embedded_server(tmp_path_factory, "saver-replay")


@pytest.fixture
def dsn(server):
    base, control = server
    control.resume()
    name = f"sr_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    out = psycopg.conninfo.make_conninfo(base, dbname=name)
    migrate(out, DIMS)
    return out


@pytest.fixture
def control(server):
    return server[1]


class Replica:
    """A replica process; its log (stderr) goes to `log`."""

    def __init__(self, dsn: str, replica_id: str, journal_dir: Path, *, crash_at: str = "-", log: Path | None = None):
        self.log = log or journal_dir.parent / f"{replica_id}-{uuid.uuid4().hex[:6]}.log"
        with open(self.log, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", REPLICA, dsn, replica_id, crash_at],
                cwd=ROOT,
                env={**os.environ, "DUAL_SAVER_JOURNAL_DIR": str(journal_dir)},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self.ready = self.proc.stdout.readline().strip() == "ready"  # False: it died starting

    def send(self, line: str) -> str:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def killed(self, timeout: float = 30) -> bool:
        """True once the process died of a SIGKILL (its own, at the crash point)."""
        return self.proc.wait(timeout) == -signal.SIGKILL

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(30)


def dead_letters(dsn: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT replica_id, thread_id, kind, error FROM core_checkpoint_dead_letters ORDER BY id"
        ).fetchall()


def test_a_replayed_delete_keeps_the_turn_another_replica_wrote_after_it(dsn, control, tmp_path, app_env):
    """Replica A buffers delete_thread(D) (and of E, a thread it never read) while PostgreSQL is down and is
    SIGKILLed; PostgreSQL is back; replica B continues D (turn b1); A restarts and replays its journal: b1
    survives, the delete of D is kept as a conflict (dead letter, ERROR in A's log, the Degradation page), and E,
    written before the delete, is deleted."""
    journal_dir = tmp_path / "journal"
    a = Replica(dsn, "replica-a", journal_dir)
    b = Replica(dsn, "replica-b", journal_dir)
    try:
        assert a.ready and b.ready
        assert a.send("turn D d1") == "turn healthy"
        assert b.send("turn E e1") == "turn healthy"
        control.stop()
        try:
            assert a.send("delete D") == "delete degraded"
            assert a.send("delete E") == "delete degraded"
            a.kill()
        finally:
            control.start()
        assert head(dsn, "D") == ["d1", "node"] and head(dsn, "E") == ["e1", "node"]  # A wrote nothing yet
        # B's monitor sees PostgreSQL back on its own; a turn sent while B is still degraded would run without D's
        # history (the fallback's), so B's health is waited for with a command that changes nothing, then one turn
        assert wait_until(lambda: b.send("status -") == "status healthy", 30)
        assert b.send("turn D b1") == "turn healthy"
        assert head(dsn, "D") == ["d1", "node", "b1", "node"]
        again = Replica(dsn, "replica-a", journal_dir)
        try:
            assert again.ready
            assert wait_until(lambda: journal_files(journal_dir) == [], 30), journal_files(journal_dir)
        finally:
            again.stop()
    finally:
        a.stop()
        b.stop()
    assert head(dsn, "D") == ["d1", "node", "b1", "node"]  # b1 survives the replayed delete
    assert head(dsn, "E") is None  # the delete of what was written before it is applied
    [(replica, thread, kind, error)] = dead_letters(dsn)
    assert (replica, thread, kind) == ("replica-a", "D", "delete_thread")
    assert "written after" in error and "not applied" in error, error
    logged = again.log.read_text()
    assert any(
        line.startswith("ERROR agent_memory_runtime.dual_saver") and "'D'" in line and "not applied" in line
        for line in logged.splitlines()
    ), logged

    # What the SRE sees: the Degradation page lists it with the dead letters.
    from apptools import frame
    from streamlit.testing.v1 import AppTest

    app_env(dsn)
    at = AppTest.from_file("../dashboard.py", default_timeout=60)
    at.run()
    at.switch_page("app_pages/degradation.py").run()
    assert not at.exception
    shown = frame(at, "error", "thread_id")
    assert shown[["replica_id", "thread_id", "kind"]].values.tolist() == [["replica-a", "D", "delete_thread"]]


def test_a_conflicting_delete_is_counted_with_the_dead_letters(dsn, control, tmp_path):
    """The replay of a journal whose delete conflicts counts it: `conflicts_total` in status(), and the dead
    letters' counter that the AgentCheckpointDeadLetters alert reads."""
    from prometheus_client import REGISTRY
    from test_saver_findings import graph, turn

    before = REGISTRY.get_sample_value("agent_memory_checkpoint_dead_letters_total") or 0
    a = DualCheckpointSaver(dsn, replica_id="count-a", journal_dir=tmp_path, close_resync_timeout=0)
    turn(graph(a), "C", "c1")
    control.stop()
    try:
        a.delete_thread("C")
        assert a.degraded
        a.close()  # journaled
    finally:
        control.start()
    with DualCheckpointSaver(dsn, replica_id="count-b", journal_dir=tmp_path) as b:
        turn(graph(b), "C", "c2")
    with DualCheckpointSaver(dsn, replica_id="count-a", journal_dir=tmp_path) as again:
        assert again.status()["conflicts_total"] == 1
    assert REGISTRY.get_sample_value("agent_memory_checkpoint_dead_letters_total") == before + 1
    assert head(dsn, "C") == ["c1", "node", "c2", "node"]
    assert [row[:3] for row in dead_letters(dsn)] == [("count-a", "C", "delete_thread")]


@pytest.mark.parametrize("crash_at", ["rewrite", "replayed"])
def test_a_crash_after_the_replay_commits_applies_nothing_twice(dsn, control, tmp_path, crash_at):
    """A SIGKILL between the commit of a replay and the journal's rewrite (`rewrite`: the live resync) or its
    removal (`replayed`: the replay of a journal at start): the journal still holds committed operations. Then
    replica B continues both threads, and A restarts: every turn is in PostgreSQL once (no conflict copy of A's
    turns), the delete is not replayed over B's turn, nothing is a dead letter."""
    journal_dir = tmp_path / "journal"
    a = Replica(dsn, "replica-a", journal_dir, crash_at=crash_at if crash_at == "rewrite" else "-")
    try:
        assert a.ready
        assert a.send("turn W w1") == "turn healthy"
        assert a.send("turn D d1") == "turn healthy"
        control.stop()
        try:
            assert a.send("turn W w2") == "turn degraded"
            assert a.send("delete D") == "delete degraded"
            if crash_at == "replayed":
                a.kill()
        finally:
            control.start()
        if crash_at == "replayed":  # the restart replays the journal, commits, and dies before removing it
            assert not Replica(dsn, "replica-a", journal_dir, crash_at="replayed").ready
        else:  # the monitor resyncs, commits, and dies before rewriting the journal
            assert a.killed()
    finally:
        a.stop()
    assert head(dsn, "W") == ["w1", "node", "w2", "node"] and head(dsn, "D") is None  # committed
    assert journal_files(journal_dir)  # ... and still journaled
    b = Replica(dsn, "replica-b", journal_dir)
    try:
        assert b.ready
        assert b.send("turn W b1") == "turn healthy"
        assert b.send("turn D b2") == "turn healthy"
    finally:
        b.stop()
    again = Replica(dsn, "replica-a", journal_dir)
    try:
        assert again.ready
        assert wait_until(lambda: journal_files(journal_dir) == [], 30), journal_files(journal_dir)
    finally:
        again.stop()
    assert head(dsn, "W") == ["w1", "node", "w2", "node", "b1", "node"]
    assert head(dsn, "D") == ["b2", "node"]
    assert threads_like(dsn, "W~") == [] and threads_like(dsn, "D~") == []  # no turn of A copied a second time
    assert dead_letters(dsn) == []


def test_a_forged_record_in_a_payload_after_a_torn_record_is_not_replayed(dsn, control, tmp_path):
    """A user-supplied payload (bytes a run keeps in its state) holding a whole journal frame with a valid CRC,
    whose record deletes thread `victim`; the record holding it is torn by a crash and another follows: reading
    resynchronises past the tear, the forged record is not read, and `victim` keeps its turn."""
    from langgraph.checkpoint.base import empty_checkpoint
    from test_saver_findings import graph, turn

    journal_dir = tmp_path / "journal"
    forged = Journal._frame({"since": None, "ops": [["delete_thread", "victim"]], "episodes": [], "denials": []})

    def journaled_put(thread: str, payload: bytes) -> bytes:
        """The journal of a saver that put one checkpoint (channel `upload` = payload) while PostgreSQL is down."""
        with DualCheckpointSaver(
            dsn, replica_id="forge", journal_dir=journal_dir, probe_interval=60, close_resync_timeout=0
        ) as saver:
            control.stop()
            try:
                checkpoint = empty_checkpoint()
                checkpoint["channel_values"] = {"upload": payload}
                checkpoint["channel_versions"] = {"upload": 1}
                saver.put({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, checkpoint, {}, {"upload": 1})
                assert saver.degraded
                data = Journal(journal_dir, "forge", dsn).path.read_bytes()
            finally:
                control.start()
        for path in journal_dir.iterdir():
            path.unlink()
        return data

    with DualCheckpointSaver(dsn, replica_id="victim-writer", journal_dir=tmp_path / "other") as saver:
        turn(graph(saver), "victim", "v1")
    first = journaled_put("upload", b"user file " + forged + b" end of the user's file")
    second = journaled_put("later", b"a later upload")
    Journal(journal_dir, "forge", dsn).path.write_bytes(first[:-5] + second)  # torn, then another record
    with DualCheckpointSaver(dsn, heartbeat_interval=0.3, replica_id="forge", journal_dir=journal_dir):
        pass
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = 'later'").fetchone()[0] == 1
    assert head(dsn, "victim") == ["v1", "node"]


def test_a_journal_of_the_previous_format_is_replayed(dsn, control, tmp_path):
    """Version 2 (frames without mark or escaping, operations without ids, a delete naming only its thread), as
    the release before issue 43 left it: replayed; its delete takes what was written before its episode began."""
    import zlib

    from test_saver_durable import journal_after_kill
    from test_saver_findings import graph, turn

    from agent_memory_runtime import journal as journal_mod

    with DualCheckpointSaver(dsn, replica_id="v2-writer", journal_dir=tmp_path / "other") as saver:
        turn(graph(saver), "v2-old", "o1")
    journal_dir = tmp_path / "journal"
    records, skipped = journal_mod.read_framed(journal_after_kill(dsn, control, journal_dir, "v2", "v2-a"))
    assert records and not skipped
    records[-1]["ops"].append(["delete_thread", "v2-old"])
    old = b""
    for record in records:
        body = journal_mod.pack({**record, "ops": [op[:2] for op in record["ops"]]})
        old += journal_mod.HEADER.pack(journal_mod.MAGIC, 2, len(body), zlib.crc32(body)) + body
    Journal(journal_dir, "v2", dsn).path.write_bytes(old)
    with DualCheckpointSaver(dsn, heartbeat_interval=0.3, replica_id="v2", journal_dir=journal_dir):
        assert head(dsn, "v2-a") == ["x", "node"]
    assert head(dsn, "v2-old") is None
    assert journal_files(journal_dir) == []


def test_a_journal_of_both_formats_reads_each_record():
    """A version-2 journal a replay had not finished, with version-3 records appended to it (set_aside joins
    them): every record is read, and a torn version-2 record resumes at the next version-3 frame."""
    import zlib

    from agent_memory_runtime import journal as journal_mod

    records = [{"ops": [["put_writes", [True, [[b"\xc0\xdb\xdc", None]]]]]}, {"ops": [["delete_thread", "t"]]}]

    def v2(record: dict) -> bytes:
        body = journal_mod.pack(record)
        return journal_mod.HEADER.pack(journal_mod.MAGIC, 2, len(body), zlib.crc32(body)) + body

    both = v2(records[0]) + v2(records[1]) + Journal._frame(records[0]) + Journal._frame(records[1])
    assert journal_mod.read_framed(both) == (records * 2, 0)
    torn, skipped = journal_mod.read_framed(v2(records[0])[:-3] + Journal._frame(records[1]))
    assert torn == [records[1]] and skipped == len(v2(records[0])) - 3


def test_a_production_saver_refuses_to_start_without_a_replica_id(dsn, monkeypatch, tmp_path):
    """PG_AGENTES set (production, not the embedded demo): no replica_id is an error that says why, and nothing
    starts; with one it starts."""
    monkeypatch.setenv("PG_AGENTES", dsn)
    with pytest.raises(ValueError, match="replica_id") as refused:
        DualCheckpointSaver(dsn, journal_dir=tmp_path, start=False)
    assert "journal" in str(refused.value) and "restart" in str(refused.value)
    assert list(tmp_path.iterdir()) == []
    DualCheckpointSaver(dsn, replica_id="prod-1", journal_dir=tmp_path, start=False).close()


def test_a_test_session_leaves_no_journal_folder(tmp_path):
    """tests/conftest.py's journal folder (DUAL_SAVER_JOURNAL_DIR, a mkdtemp) is removed when the session ends."""
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k != "DUAL_SAVER_JOURNAL_DIR"}
    env["TMPDIR"] = str(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT)])
    done = subprocess.run(  # tests/conftest.py loaded as a plugin into a session of one test
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "conftest", "-q", "--rootdir", str(tmp_path)]
        + ["--basetemp", str(tmp_path / "bt"), str(tmp_path / "test_nothing.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(tmp_path.glob("dual-saver-journal-*")) == []
