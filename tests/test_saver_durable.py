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
from test_saver_findings import DIMS, head

from agent_memory_runtime.dual_saver import DualCheckpointSaver
from agent_memory_runtime.journal import Journal
from core.migrate import migrate

pytestmark = pytest.mark.slow  # outage drills and agent processes

ROOT = Path(__file__).resolve().parents[1]

# A real agent: one turn per line of stdin ("<thread> <text>"), answered with "<text> degraded|healthy"; a line
# "state" is answered with its saver's state alone. Its close() tries a last resync for 1 s (the saver's
# close_resync_timeout; 5 s by default) before it journals what PostgreSQL lacks: the same path, a shorter wait.
AGENT = """
import sys
sys.path.insert(0, "tests")
from agent_memory_runtime.dual_saver import DualCheckpointSaver
from turns_graph import graph, turn
saver = DualCheckpointSaver(
    sys.argv[1], heartbeat_interval=0.3, probe_interval=0.2, close_resync_timeout=1.0, replica_id=sys.argv[2]
)
app = graph(saver)
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "state":
        print("degraded" if saver.degraded else "healthy", flush=True)
        continue
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
        self.proc = subprocess.Popen(
            [sys.executable, "-c", AGENT, dsn, replica_id],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout.readline().strip() == "ready"

    def turn(self, thread: str, text: str) -> str:
        self.proc.stdin.write(f"{thread} {text}\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def state(self) -> str:
        self.proc.stdin.write("state\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def kill(self, sig: int) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(30)


def journal_files(journal_dir: Path) -> list[Path]:
    """The journal's files but its lock (which stays)."""
    return sorted(p for p in journal_dir.iterdir() if p.suffix != ".lock")


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
            assert wait_until(lambda: head(dsn, "wal") == ["t1", "node", "t2", "node", "t3", "node"], 30), head(
                dsn, "wal"
            )
            assert head(dsn, "wal-new") == ["n1", "node"]
            assert again.turn("wal", "t4") == "t4 healthy"
        finally:
            again.stop()
        assert head(dsn, "wal") == ["t1", "node", "t2", "node", "t3", "node", "t4", "node"]
        assert journal_files(tmp_path / "journal") == []
    finally:
        agent.stop()


def journal_after_kill(dsn: str, control, journal_dir: Path, replica_id: str, thread: str) -> bytes:
    """The journal an agent leaves when killed after one turn on `thread` while PostgreSQL is down (taken away)."""
    control.stop()
    try:
        agent = Agent(dsn, replica_id, journal_dir)
        assert agent.turn(thread, "x") == "x degraded"
        agent.kill(signal.SIGKILL)
    finally:
        control.start()
    [path] = journal_dir.glob("*.journal")
    data = path.read_bytes()
    path.unlink()
    return data


def test_a_torn_record_mid_journal_is_skipped_and_the_rest_replayed(dsn, control, tmp_path, caplog):
    """A crash mid-append, then a later append: the records after the torn one are replayed, the damaged file
    is moved aside and said at ERROR, and the saver starts."""
    journal_dir = tmp_path / "journal"
    first = journal_after_kill(dsn, control, journal_dir, "torn", "torn-a")
    second = journal_after_kill(dsn, control, journal_dir, "torn", "torn-b")
    # The last record of the first run cut short, then the second run's records.
    Journal(journal_dir, "torn", dsn).path.write_bytes(first[:-5] + second)
    with (
        caplog.at_level("ERROR", logger="agent_memory_runtime.dual_saver"),
        DualCheckpointSaver(dsn, heartbeat_interval=0.3, replica_id="torn", journal_dir=journal_dir),
    ):
        assert head(dsn, "torn-b") == ["x", "node"]
    damaged = list(journal_dir.glob("*.damaged*"))
    assert len(damaged) == 1 and damaged[0].read_bytes() == first[:-5] + second
    assert any(r.levelname == "ERROR" and str(damaged[0]) in r.getMessage() for r in caplog.records), [
        r.getMessage() for r in caplog.records
    ]
    assert journal_files(journal_dir) == damaged  # replayed, then removed; the damaged copy stays


def test_a_journal_of_the_earlier_format_is_replayed(dsn, control, tmp_path):
    """Version 1 (length-prefixed msgpack, before issue 25), as an earlier release's close() left it."""
    import struct

    import ormsgpack

    from agent_memory_runtime import journal as journal_mod

    journal_dir = tmp_path / "journal"
    framed = journal_after_kill(dsn, control, journal_dir, "legacy", "legacy-a")
    records, skipped = journal_mod.read_framed(framed)
    assert records and not skipped
    old = {
        "replica_id": "legacy",
        "since": records[0]["since"],
        "ops": [op for r in records for op in r["ops"]],
        "checkpoints": 2,
        "writes": 2,
        "episodes": [],
        "denials": [],
    }
    body = ormsgpack.packb(old, default=journal_mod.pack_default, option=ormsgpack.OPT_PASSTHROUGH_DATETIME)
    Journal(journal_dir, "legacy", dsn).path.write_bytes(struct.pack(">I", len(body)) + body)
    with DualCheckpointSaver(dsn, heartbeat_interval=0.3, replica_id="legacy", journal_dir=journal_dir):
        assert head(dsn, "legacy-a") == ["x", "node"]
    assert journal_files(journal_dir) == []


def test_two_processes_with_one_journal_keep_each_others_records(dsn, control, tmp_path):
    """Two agent processes with one replica id (one journal path): the resync of one does not remove what the
    other journaled; the other is killed, and a restart replays its turn."""
    journal_dir = tmp_path / "journal"
    first = Agent(dsn, "shared", journal_dir)
    second = Agent(dsn, "shared", journal_dir)
    try:
        control.stop()
        try:
            assert first.turn("shared-a", "a1") == "a1 degraded"
            assert second.turn("shared-b", "b1") == "b1 degraded"
            second.kill(signal.SIGKILL)
        finally:
            control.start()
        assert wait_until(lambda: head(dsn, "shared-a") == ["a1", "node"], 30)
        # the replay's commit shows before the saver says healthy: wait for that too (a turn in between is buffered)
        assert wait_until(lambda: first.state() == "healthy", 30)
        assert first.turn("shared-a", "a2") == "a2 healthy"  # the first one resynced, its log is empty
        first.kill(signal.SIGKILL)
        assert head(dsn, "shared-b") is None
        again = Agent(dsn, "shared", journal_dir)
        try:
            assert wait_until(lambda: head(dsn, "shared-b") == ["b1", "node"], 30), head(dsn, "shared-b")
        finally:
            again.stop()
    finally:
        first.stop()
        second.stop()


def test_a_journal_set_aside_during_a_replay_is_replayed_next(tmp_path):
    """Process 1 replays the journal it set aside; process 2 starts meanwhile and sets its predecessor's journal
    aside too: process 1's end of replay keeps what it did not read."""
    dsn = "host=/nowhere dbname=x"
    one, two = Journal(tmp_path, "r", dsn), Journal(tmp_path, "r", dsn)
    one.append({"ops": [["delete_thread", "a"]]})
    assert one.set_aside()
    assert [r["ops"] for r in one.read()] == [[["delete_thread", "a"]]]
    two.append({"ops": [["delete_thread", "b"]]})
    assert two.set_aside()
    assert one.replayed()  # more to replay
    assert [r["ops"] for r in one.read()] == [[["delete_thread", "b"]]]
    assert not one.replayed()
    assert journal_files(tmp_path) == []


def test_one_bad_buffered_write_goes_to_the_dead_letters_and_the_rest_through(dsn, control, tmp_path):
    """A string with NUL, buffered while PostgreSQL is down, is refused by PostgreSQL on replay
    (UntranslatableCharacter): it goes to core_checkpoint_dead_letters, the good turns are resynced, the
    replica is healthy again and the dead-letter counter rises."""
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from prometheus_client import REGISTRY
    from test_saver_findings import graph, turn

    class Note(TypedDict):
        note: str

    builder = StateGraph(Note)
    builder.add_node("node", lambda state: {"note": state["note"] + "."})
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    before = REGISTRY.get_sample_value("agent_memory_checkpoint_dead_letters_total") or 0
    with DualCheckpointSaver(
        dsn, heartbeat_interval=0.3, probe_interval=0.2, replica_id="bad-data", journal_dir=tmp_path
    ) as saver:
        notes, app = builder.compile(checkpointer=saver), graph(saver)
        turn(app, "good", "g1")
        control.stop()
        try:
            turn(app, "good", "g2")
            notes.invoke({"note": "a\x00b"}, {"configurable": {"thread_id": "bad"}})
            turn(app, "good", "g3")
            assert saver.degraded
        finally:
            control.start()
        assert saver.wait_for("healthy", 30), saver.status()
        assert head(dsn, "good") == ["g1", "node", "g2", "node", "g3", "node"]
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT replica_id, thread_id, kind, error, octet_length(payload) > 0 "
            "FROM core_checkpoint_dead_letters ORDER BY id"
        ).fetchall()
    assert rows and {r[:3] for r in rows} <= {("bad-data", "bad", "put")}, rows
    assert all("UntranslatableCharacter" in r[3] and r[4] for r in rows), rows
    assert REGISTRY.get_sample_value("agent_memory_checkpoint_dead_letters_total") == before + len(rows)


def test_the_degradation_page_lists_dead_letters(db, app_env):
    from apptools import frame
    from streamlit.testing.v1 import AppTest

    db.execute(
        "INSERT INTO core_checkpoint_dead_letters (replica_id, thread_id, kind, error, payload) VALUES "
        "('r-dl', 'cliente-DL-1', 'put', 'UntranslatableCharacter: **\\u0000** cannot be converted', '\\x00')"
    )
    app_env(db.dsn)
    at = AppTest.from_file("../dashboard.py", default_timeout=60)
    at.run()
    at.switch_page("app_pages/degradation.py").run()
    assert not at.exception
    shown = frame(at, "error", "thread_id")
    assert shown[["replica_id", "thread_id", "kind", "error"]].values.tolist() == [
        ["r-dl", "cliente-DL-1", "put", "UntranslatableCharacter: **\\u0000** cannot be converted"]
    ]


def test_the_buffer_is_bounded_with_a_clear_refusal(dsn, control, tmp_path):
    """`max_buffered_ops`: at the bound a buffered call is refused (BufferFull, nothing changed), the status and
    the metrics give the bound; what was accepted reaches PostgreSQL."""
    from test_saver_findings import graph, turn

    from agent_memory_runtime import metrics
    from agent_memory_runtime.failures import BufferFull

    with DualCheckpointSaver(
        dsn, heartbeat_interval=0.3, probe_interval=0.2, replica_id="bounded", journal_dir=tmp_path, max_buffered_ops=6
    ) as saver:
        app = graph(saver)
        turn(app, "bounded", "b1")
        control.stop()
        try:
            turn(app, "bounded", "b2")  # 4 operations: 2 checkpoints, 2 writes
            with pytest.raises(BufferFull, match="6 operations"):
                turn(app, "bounded", "b3")
            status = saver.status()
            assert status["buffered_ops"] == 6 and status["buffer_limit"] == 6
            journaled = Journal(tmp_path, "bounded", dsn).path.read_bytes()
            with pytest.raises(BufferFull):
                saver.delete_thread("bounded")
            assert saver.status()["buffered_ops"] == 6
            assert Journal(tmp_path, "bounded", dsn).path.read_bytes() == journaled  # the refusal changed nothing
            scraped = {m.name: m.samples[0].value for m in metrics.status_metrics([status])}
            assert scraped["agent_memory_checkpoint_buffer_limit_operations"] == 6
        finally:
            control.start()
        assert saver.wait_for("healthy", 30)
        assert head(dsn, "bounded")[:4] == ["b1", "node", "b2", "node"]


@pytest.mark.browser
def test_browser_degradation_page_shows_a_dead_letter(page, db, screenshot):
    from conftest import start_streamlit, stop_streamlit
    from playwright.sync_api import expect

    db.execute(
        "INSERT INTO core_checkpoint_dead_letters (replica_id, thread_id, kind, error, payload) VALUES "
        "('r-dl', 'cliente-DL-1', 'put', 'UntranslatableCharacter: <b>x</b> cannot be converted', '\\x00')"
    )
    proc, url = start_streamlit({"PG_AGENTES": db.dsn})
    try:
        page.goto(f"{url}/degradation")
        expect(
            page.get_by_role("heading", name="Operaciones rechazadas al resincronizar (dead letters)")
        ).to_be_visible(timeout=30_000)
        expect(page.get_by_test_id("stDataFrame").get_by_text("cliente-DL-1")).to_be_attached()
        page.get_by_test_id("stDataFrame").last.scroll_into_view_if_needed()
        screenshot("degradation-dead-letters")
    finally:
        stop_streamlit(proc)


def test_a_customers_dead_letter_is_in_their_access_export_and_erased_with_them(dsn, control, tmp_path):
    """Issue 42: a buffered write of a customer's conversation that PostgreSQL refused on resync (a real dead letter)
    is listed in the customer's art. 15 export (es and en, no internal key) and erased with the customer: the
    evidence counts the dead letters and reads 0 after."""
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    from core.db import Database
    from core.privacy import access, erasure

    class Note(TypedDict):
        note: str

    builder = StateGraph(Note)
    builder.add_node("node", lambda state: {"note": state["note"] + "."})
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    config = {"configurable": {"thread_id": "nota-C5"}, "metadata": {"cliente_id": "C5"}}
    with DualCheckpointSaver(
        dsn, heartbeat_interval=0.3, probe_interval=0.2, replica_id="dl-export", journal_dir=tmp_path
    ) as saver:
        notes = builder.compile(checkpointer=saver)
        notes.invoke({"note": "recoger en T002"}, config)
        control.stop()
        try:
            notes.invoke({"note": "a\x00b"}, config)
            assert saver.degraded
        finally:
            control.start()
        assert saver.wait_for("healthy", 30), saver.status()
    db = Database(dsn)
    try:
        count = "SELECT count(*) AS n FROM core_checkpoint_dead_letters WHERE thread_id = 'nota-C5'"
        assert db.fetch_one(count)["n"] > 0
        report = access.gather(db, "C5")
        assert [r["thread_id"] for r in report.logs["dead_letters"]] == ["nota-C5"] * db.fetch_one(count)["n"]
        assert report.counts["dead_letters"] == db.fetch_one(count)["n"]
        for lang, heading, kind in (
            ("es", "Operaciones de una conversación que no se pudieron guardar", "guardar un paso de la conversación"),
            ("en", "Operations on a conversation that could not be saved", "save a step of the conversation"),
        ):
            html = access.export(db, "C5", fmt="html", lang=lang, operator="dpo@example.com").data.decode()
            letter = html.split("<h2>Anexo técnico")[0].split("<h2>Technical annex")[0]  # what a person reads
            assert heading in letter and kind in letter and "dead_letters" not in letter
        result = erasure.erase(db, "C5", operator="dpo@example.com")
        assert result.complete, result
        assert db.fetch_one(count)["n"] == 0
        evidence = {e.table: e.result for e in result.evidence}
        assert evidence.get("core_checkpoint_dead_letters") == 0, evidence
        assert access.gather(db, "C5").logs["dead_letters"] == []
    finally:
        db.close()
