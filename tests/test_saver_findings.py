"""Issue 16's findings on the dual saver, each reproduced on a real embedded server of its own.

A plain `StateGraph` with an `operator.add` list channel, as a new user would write it (tests/turns_graph.py): every
turn appends its input and the node's mark, so the head checkpoint of a thread lists every turn in order and a lost
turn shows at once.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from conftest import own_embedded_server
from langgraph.checkpoint.postgres import PostgresSaver
from turns_graph import graph, turn

from agent_memory_runtime.dual_saver import DualCheckpointSaver
from agent_memory_runtime.serde import make_serializer
from core.db import make_pool
from core.migrate import migrate

pytestmark = pytest.mark.slow  # outage drills on a server of its own

DIMS = 64


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from own_embedded_server(tmp_path_factory, "saver-findings")


@pytest.fixture
def dsn(server):
    base, control = server
    control.resume()
    name = f"sf_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    out = psycopg.conninfo.make_conninfo(base, dbname=name)
    migrate(out, DIMS)
    return out


@pytest.fixture
def control(server):
    return server[1]


def head(dsn: str, thread: str) -> list | None:
    """The thread's head as PostgreSQL (stock saver) serves it."""
    pool = make_pool(dsn, name="inspect")
    try:
        tup = PostgresSaver(pool, serde=make_serializer()).get_tuple({"configurable": {"thread_id": thread}})
    finally:
        pool.close()
    return None if tup is None else tup.checkpoint["channel_values"]["log"]


def threads_like(dsn: str, prefix: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT DISTINCT thread_id FROM checkpoints WHERE starts_with(thread_id, %s) ORDER BY 1", (prefix,)
            )
        ]


def outage(saver, control, *actions):
    """Stop the server, run `actions` (degraded), start it and wait for the resync."""
    control.stop()
    try:
        for action in actions:
            action()
        assert saver.degraded
    finally:
        control.start()
    assert saver.wait_for("healthy", 30)


# --- finding 1: stale reads after a second outage ---------------------------------------------


def test_idle_thread_between_two_outages_keeps_every_turn(dsn, control):
    with DualCheckpointSaver(dsn, heartbeat_interval=0.3, replica_id="f1-idle") as saver:
        app = graph(saver)
        assert turn(app, "f1", "t1") == ["t1", "node"]
        outage(saver, control, lambda: turn(app, "f1", "t2"))
        assert head(dsn, "f1") == ["t1", "node", "t2", "node"]
        # Idle in between: nothing reads f1 until the second outage.
        outage(saver, control, lambda: turn(app, "f1", "t3"))
        saver.record_denial(denial("f1"))
        status = saver.status()
    assert head(dsn, "f1") == ["t1", "node", "t2", "node", "t3", "node"]
    # The counters a metrics collector reads.
    assert status["resyncs_total"] == 2 and status["episodes_total"] == 2 and status["resynced_ops_total"] >= 4
    assert status["resync_seconds_total"] > 0 and status["conflicts_total"] == 0
    assert status["denials_by"] == [{"tool": "publicar_aviso", "risk": "HIGH", "total": 1}]
    assert status["degraded_since"] is None and status["degraded_seconds"] == 0.0


def test_thread_never_read_before_the_outage_is_not_overwritten(dsn, control):
    """This replica never saw the thread: its degraded turn cannot be chained on PostgreSQL's head.

    PostgreSQL keeps the thread's own history as its head, and the turn made while degraded is
    kept too (in a conflict thread named after it), never silently dropped or put on top.
    """
    with DualCheckpointSaver(dsn, heartbeat_interval=0.3, replica_id="f1-other") as other:
        assert turn(graph(other), "f1-unread", "t1") == ["t1", "node"]
    with DualCheckpointSaver(dsn, heartbeat_interval=0.3, replica_id="f1-fresh") as saver:
        app = graph(saver)
        outage(saver, control, lambda: turn(app, "f1-unread", "t2"))
        status = saver.status()
    assert head(dsn, "f1-unread") == ["t1", "node"]
    assert status.get("conflicts_total") == 1
    kept = [t for t in threads_like(dsn, "f1-unread") if t != "f1-unread"]
    assert len(kept) == 1 and kept[0].startswith("f1-unread~conflict~f1-fresh~")
    assert head(dsn, kept[0]) == ["t2", "node"]


def test_two_replicas_a_stale_cache_does_not_drop_the_other_replicas_turn(dsn, control):
    with (
        DualCheckpointSaver(dsn, heartbeat_interval=0.3, replica_id="f1-a") as a,
        DualCheckpointSaver(dsn, heartbeat_interval=0.3, replica_id="f1-b") as b,
    ):
        app_a, app_b = graph(a), graph(b)
        assert turn(app_a, "f1-two", "t1") == ["t1", "node"]  # A caches the thread here
        assert turn(app_b, "f1-two", "t2") == ["t1", "node", "t2", "node"]
        control.stop()
        try:
            turn(app_a, "f1-two", "t3")  # A only knows t1
            assert a.degraded
        finally:
            control.start()
        assert a.wait_for("healthy", 30)
        status = a.status()
    assert head(dsn, "f1-two") == ["t1", "node", "t2", "node"]
    assert status.get("conflicts_total") == 1
    kept = [t for t in threads_like(dsn, "f1-two") if t != "f1-two"]
    assert len(kept) == 1 and head(dsn, kept[0]) == ["t1", "node", "t3", "node"]


# --- finding 2: close() while degraded ------------------------------------------------------------


def episodes_of(dsn: str, replica_id: str) -> list[dict]:
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        return conn.execute("SELECT * FROM core_degradation_episodes WHERE replica_id = %s", (replica_id,)).fetchall()


def denial(thread: str) -> dict:
    from datetime import UTC, datetime

    return {
        "tool": "publicar_aviso",
        "risk": "HIGH",
        "thread_id": thread,
        "subject_root": None,
        "subject_id": None,
        "customer_id": None,
        "reason": "degraded",
        "denied_at": datetime.now(UTC),
    }


def test_closed_mid_outage_then_restarted_keeps_every_turn(dsn, control, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("DUAL_SAVER_JOURNAL_DIR", str(tmp_path / "journal"))
    # close() below tries a last resync while the server is down for close_resync_timeout (1 s, not the default
    # 5 s: the same attempts, fewer of them), then journals
    saver = DualCheckpointSaver(dsn, heartbeat_interval=0.3, close_resync_timeout=1.0, replica_id="f2-rolling")
    app = graph(saver)
    assert turn(app, "f2", "t1") == ["t1", "node"]
    control.stop()
    try:
        assert turn(app, "f2", "t2") == ["t1", "node", "t2", "node"]
        assert turn(app, "f2-new", "n1") == ["n1", "node"]
        assert saver.degraded
        saver.record_denial(denial("f2"))
        with caplog.at_level("ERROR", logger="agent_memory_runtime.dual_saver"):
            saver.close()  # a rolling restart during the outage
    finally:
        control.start()
    assert any(
        r.levelname == "ERROR" and "f2-rolling" in r.getMessage() and "journal" in r.getMessage()
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records]
    # The next start with the same replica id replays what the closed one held.
    with DualCheckpointSaver(dsn, heartbeat_interval=0.3, replica_id="f2-rolling") as again:
        assert head(dsn, "f2") == ["t1", "node", "t2", "node"]
        assert head(dsn, "f2-new") == ["n1", "node"]
        assert turn(graph(again), "f2", "t3") == ["t1", "node", "t2", "node", "t3", "node"]
        wait = __import__("time").monotonic() + 30
        while not episodes_of(dsn, "f2-rolling") and __import__("time").monotonic() < wait:
            __import__("time").sleep(0.1)
    eps = episodes_of(dsn, "f2-rolling")
    assert len(eps) == 1 and eps[0]["checkpoints_buffered"] >= 2
    assert [d["tool"] for d in eps[0]["denials"]] == ["publicar_aviso"]
    assert not list((tmp_path / "journal").glob("*.journal"))
    # Idempotent: a third start finds nothing to replay and changes nothing.
    with DualCheckpointSaver(dsn, heartbeat_interval=0.3, replica_id="f2-rolling"):
        pass
    assert head(dsn, "f2") == ["t1", "node", "t2", "node", "t3", "node"]
    assert len(episodes_of(dsn, "f2-rolling")) == 1


def test_close_tries_a_final_resync_when_postgres_is_back(dsn, control, tmp_path, monkeypatch):
    monkeypatch.setenv("DUAL_SAVER_JOURNAL_DIR", str(tmp_path / "journal"))
    # A long probe interval: the monitor does not resync on its own before close().
    saver = DualCheckpointSaver(dsn, heartbeat_interval=0.3, probe_interval=600, replica_id="f2-final")
    app = graph(saver)
    turn(app, "f2-final", "t1")
    control.stop()
    try:
        turn(app, "f2-final", "t2")
        assert saver.degraded
    finally:
        control.start()
    saver.close()
    assert head(dsn, "f2-final") == ["t1", "node", "t2", "node"]
    assert not list((tmp_path / "journal").glob("*.journal"))


# --- finding 3: event loops' entries ---------------------------------------------------------------


def test_closed_event_loops_are_released_and_a_new_loop_gets_a_working_pool(dsn):
    """`asyncio.run` after `asyncio.run`, with and without `aclose_loop`.

    Found: the id-keyed entries pin every loop they saw (the wrapped AsyncPostgresSaver holds its
    loop), so an id is not reused while its entry lives, but no entry is ever removed: closed loops,
    their savers and pools pile up. A new loop must get a working pool and closed loops must go.
    """
    import asyncio
    import gc
    import weakref

    from langgraph.checkpoint.base import empty_checkpoint

    with DualCheckpointSaver(dsn, heartbeat_interval=0.3, replica_id="f3-loops") as saver:
        loops = []

        async def one_turn(n: int, close: bool) -> None:
            loops.append(weakref.ref(asyncio.get_running_loop()))
            config = {"configurable": {"thread_id": f"f3-{n}", "checkpoint_ns": ""}}
            await saver.aput(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
            assert (await saver.aget_tuple(config)) is not None
            if close:
                await saver.aclose_loop()

        for n in range(6):
            asyncio.run(one_turn(n, close=n % 2 == 0))
            assert not saver.degraded, (n, saver.status()["reason"])
        gc.collect()
        assert [n for n, ref in enumerate(loops[:-1]) if ref() is not None] == []
        assert len(saver._postgres._async_entries) <= 1 and len(saver._postgres._pools.async_pools) <= 1
        assert saver.status()["episodes_total"] == 0


def test_a_clone_does_not_keep_the_pool_aclose_loop_closed(dsn):
    """`StateGraph.compile` works on a `with_allowlist` clone; closing the loop's pool through the
    original must not leave the clone a closed pool (PoolClosed: a false degradation)."""
    import asyncio

    from langgraph.checkpoint.base import empty_checkpoint

    with DualCheckpointSaver(dsn, heartbeat_interval=0.3, replica_id="f3-clone") as saver:
        clone = saver.with_allowlist([])

        async def scenario() -> None:
            for n in range(2):
                config = {"configurable": {"thread_id": f"f3-clone-{n}", "checkpoint_ns": ""}}
                await clone.aput(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
                await saver.aclose_loop()
            await clone.aclose_loop()

        asyncio.run(scenario())
        assert not saver.degraded, saver.status()["reason"]
        assert saver.status()["episodes_total"] == 0


# --- finding 6: the watchdog thread, and the sync API on the event loop ------------------------------


def saver_threads(replica_id: str) -> list[str]:
    import threading

    return [t.name for t in threading.enumerate() if t.is_alive() and t.name.endswith(replica_id)]


def test_close_stops_every_thread_of_the_saver(dsn):
    import time

    with DualCheckpointSaver(dsn, heartbeat_interval=0.3, replica_id="f6-threads") as saver:
        turn(graph(saver), "f6", "t1")
        assert any("watchdog" in name for name in saver_threads("f6-threads"))
    deadline = time.monotonic() + 30
    while saver_threads("f6-threads") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert saver_threads("f6-threads") == []


def test_sync_calls_on_the_event_loop_thread_are_refused(dsn):
    """As langgraph's own savers do: a sync call there would block every task of the loop."""
    import asyncio

    with DualCheckpointSaver(dsn, heartbeat_interval=0.3, replica_id="f6-loop") as saver:
        app = graph(saver)

        async def on_the_loop() -> None:
            with pytest.raises(asyncio.InvalidStateError):
                turn(app, "f6-loop", "t1")
            with pytest.raises(asyncio.InvalidStateError):
                saver.get_tuple({"configurable": {"thread_id": "f6-loop"}})
            with pytest.raises(asyncio.InvalidStateError):
                list(saver.list({"configurable": {"thread_id": "f6-loop"}}))
            # From another thread it is fine, and the async API is fine on the loop.
            assert await asyncio.to_thread(turn, app, "f6-loop", "t1") == ["t1", "node"]
            assert (await app.ainvoke({"log": ["t2"]}, {"configurable": {"thread_id": "f6-loop"}}))["log"] == [
                "t1",
                "node",
                "t2",
                "node",
            ]
            await saver.aclose_loop()

        asyncio.run(on_the_loop())
        assert head(dsn, "f6-loop") == ["t1", "node", "t2", "node"]


# --- finding 7: errors kept out of sight ------------------------------------------------------------


def wait_until(predicate, timeout: float = 30.0) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_a_monitor_error_that_clears_and_comes_back_is_logged_again(dsn, caplog):
    def errors() -> int:
        return sum(
            1
            for r in caplog.records
            if r.name == "agent_memory_runtime.dual_saver" and r.levelname == "ERROR" and "monitor" in r.getMessage()
        )

    def beats(after) -> int:
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT count(*) FROM core_replica_heartbeat WHERE replica_id = 'f7-monitor' AND updated_at > %s",
                (after,),
            ).fetchone()
        return row[0]

    with (
        caplog.at_level("WARNING", logger="agent_memory_runtime.dual_saver"),
        DualCheckpointSaver(dsn, heartbeat_interval=0.2, replica_id="f7-monitor"),
        psycopg.connect(dsn, autocommit=True) as admin,
    ):
        started = admin.execute("SELECT now()").fetchone()[0]
        assert wait_until(lambda: beats(started) == 1)
        admin.execute("ALTER TABLE core_replica_heartbeat RENAME TO core_replica_heartbeat_away")
        assert wait_until(lambda: errors() == 1)
        admin.execute("ALTER TABLE core_replica_heartbeat_away RENAME TO core_replica_heartbeat")
        back = admin.execute("SELECT now()").fetchone()[0]
        assert wait_until(lambda: beats(back) == 1)  # cleared: a heartbeat written after it came back
        admin.execute("ALTER TABLE core_replica_heartbeat RENAME TO core_replica_heartbeat_away")
        assert wait_until(lambda: errors() == 2), "the error came back and was not logged"
        admin.execute("ALTER TABLE core_replica_heartbeat_away RENAME TO core_replica_heartbeat")


def test_failed_probes_are_logged_while_degraded(dsn, control, caplog):
    with (
        caplog.at_level("WARNING", logger="agent_memory_runtime.dual_saver"),
        DualCheckpointSaver(dsn, heartbeat_interval=0.2, replica_id="f7-probe") as saver,
    ):
        turn(graph(saver), "f7", "t1")
        control.stop()
        try:
            turn(graph(saver), "f7", "t2")
            assert wait_until(
                lambda: any(
                    r.name == "agent_memory_runtime.dual_saver"
                    and r.levelname == "WARNING"
                    and "probe failed" in r.getMessage()
                    for r in caplog.records
                )
            )
        finally:
            control.start()
        assert saver.wait_for("healthy", 30)


# --- finding 8 (saver side): erased data brought back by a replica -----------------------------------


def erase(dsn: str, thread: str, request_id: int) -> None:
    """What the erasure does for a thread: a tombstone row, then langgraph's own delete_thread."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO core_thread_tombstones (thread_id, request_id) VALUES (%s, %s) "
            "ON CONFLICT (thread_id) DO NOTHING",
            (thread, request_id),
        )
    pool = make_pool(dsn, name="erasure")
    try:
        PostgresSaver(pool).delete_thread(thread)
    finally:
        pool.close()


def rows_of(dsn: str, thread: str) -> int:
    with psycopg.connect(dsn) as conn:
        return sum(
            conn.execute(f"SELECT count(*) FROM {table} WHERE thread_id = %s", (thread,)).fetchone()[0]
            for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
        )


def test_a_replica_degraded_during_an_erasure_does_not_bring_it_back(dsn, control, caplog):
    # A long probe interval: after its first failed probe the replica stays degraded (cut off) while
    # the erasure runs on a PostgreSQL that is back; close() then resyncs it.
    saver = DualCheckpointSaver(dsn, heartbeat_interval=0.3, probe_interval=600, replica_id="f8-replay")
    app = graph(saver)
    turn(app, "cliente-C9-1", "t1")
    turn(app, "cliente-C9-2", "k1")
    control.stop()
    try:
        assert turn(app, "cliente-C9-1", "t2") == ["t1", "node", "t2", "node"]
        assert saver.degraded
    finally:
        control.start()
    erase(dsn, "cliente-C9-1", 901)
    erase(dsn, "cliente-C9-2", 901)
    with caplog.at_level("WARNING", logger="agent_memory_runtime.dual_saver"):
        status_before_close = saver.status()
        saver.close()  # the final resync replays the buffer
    assert status_before_close["state"] == "degraded"
    assert rows_of(dsn, "cliente-C9-1") == 0 and rows_of(dsn, "cliente-C9-2") == 0
    assert saver.status()["tombstoned_threads_total"] == 1 and saver.status()["tombstoned_ops_dropped_total"] >= 1
    assert any(
        r.name == "agent_memory_runtime.dual_saver" and r.levelname == "WARNING" and "erased" in r.getMessage()
        for r in caplog.records
    )


def test_the_read_cache_does_not_seed_an_erased_thread(dsn, control):
    with DualCheckpointSaver(dsn, heartbeat_interval=0.2, replica_id="f8-seed") as saver:
        app = graph(saver)
        turn(app, "cliente-C8-1", "t1")  # cached by this replica
        erase(dsn, "cliente-C8-1", 902)
        assert wait_until(lambda: saver.status()["tombstones_known"] >= 1)
        control.stop()
        try:
            # The degraded turn must not start from the erased conversation.
            assert turn(app, "cliente-C8-1", "t2") == ["t2", "node"]
        finally:
            control.start()
        assert saver.wait_for("healthy", 60)
    assert rows_of(dsn, "cliente-C8-1") == 0


# --- finding 4: the resync held the shared lock during its network I/O ------------------------------


def in_thread(fn):
    """Run fn in a daemon thread; returns (thread, box) where box gets "result" or "error"."""
    import threading

    box: dict = {}

    def run():
        try:
            box["result"] = fn()
        except BaseException as exc:  # reported by the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def test_a_blocked_resync_does_not_block_buffering_reads_denials_or_status(dsn, control):
    from agent_memory_runtime.guard import GuardDenial, Risk

    # Another session holds checkpoints (a migration) when a short hang of the server degrades the
    # saver (a table lock alone does not: slow is not gone, finding 5). Once the server answers again
    # the probe (SELECT 1) passes, and the resync's replay waits on the table lock for as long as it is held.
    saver = DualCheckpointSaver(
        dsn, heartbeat_interval=0.2, probe_interval=0.2, resync_timeout=120, replica_id="f4-resync"
    )
    saver.start()
    locker = psycopg.connect(dsn)
    try:
        app = graph(saver)
        thread = "cliente-F4-1"
        assert turn(app, thread, "t1") == ["t1", "node"]
        locker.execute("LOCK TABLE checkpoints IN ACCESS EXCLUSIVE MODE")
        control.hang()
        try:
            worker, box = in_thread(lambda: turn(app, thread, "t2"))
            assert saver.wait_for("degraded", 30)
            worker.join(30)
        finally:
            control.resume()
        assert not worker.is_alive() and box.get("result") == ["t1", "node", "t2", "node"], box
        assert saver.degraded
        # The resync has started once its replay waits on the table lock (its head check, seen in
        # pg_stat_activity); status() says so too, and answers meanwhile.
        assert wait_until(lambda: replay_waiting_on_lock(dsn), 30), "the resync never started"
        assert within(saver.status, 30)["resyncing"] is True

        # While the replay waits on PostgreSQL: each of these must return (generous bound; the
        # replay itself waits up to resync_timeout=120 s). A turn first, then a read of it, a guard
        # denial and status() at once (a read during the turn could see its mid-turn checkpoint).
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        actions = {
            "buffered turn": lambda: turn(app, thread, "t3"),
            "degraded read": lambda: saver.get_tuple(config).checkpoint["channel_values"]["log"],
            "guard denial": lambda: saver.record_denial(
                GuardDenial(
                    tool="borrar_cliente",
                    risk=Risk.CRITICAL,
                    thread_id=thread,
                    subject_root="clientes",
                    subject_id="F4",
                    reason="checkpoint persistence degraded (PostgreSQL unreachable)",
                )
            ),
            "status": saver.status,
        }
        running = {"buffered turn": in_thread(actions.pop("buffered turn"))}
        running["buffered turn"][0].join(30)
        running |= {name: in_thread(fn) for name, fn in actions.items()}
        for worker, _ in running.values():
            worker.join(30)
        stuck = [name for name, (worker, _) in running.items() if worker.is_alive()]
        assert not stuck, f"blocked behind the resync: {stuck}"
        results = {name: box.get("result", box.get("error")) for name, (_, box) in running.items()}
        assert results["buffered turn"] == ["t1", "node", "t2", "node", "t3", "node"], results
        assert results["degraded read"] == ["t1", "node", "t2", "node", "t3", "node"], results
        assert results["status"]["state"] == "degraded"
        status = saver.status()
        assert status["resyncing"] is True and status["denials_total"] == 1
        assert status["state"] == "degraded" and status["last_resync_error"] is None  # still waiting on the table
    finally:
        locker.rollback()
        locker.close()
    try:
        assert saver.wait_for("healthy", 60)
        assert head(dsn, thread) == ["t1", "node", "t2", "node", "t3", "node"]
        status = saver.status()
        assert status["resyncing"] is False and status["state"] == "healthy"
    finally:
        saver.close()


def replay_waiting_on_lock(dsn: str) -> bool:
    """A resync's head check (thread_fates.HEAD_SQL) waits on a lock in PostgreSQL."""
    from agent_memory_runtime.thread_fates import HEAD_SQL

    with psycopg.connect(dsn, autocommit=True) as conn:
        return (
            conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND position(%s in query) > 0",
                (HEAD_SQL.strip().splitlines()[-1],),
            ).fetchone()[0]
            > 0
        )


def within(fn, timeout: float):
    """fn() run in a thread; fails the test if it has not returned after `timeout` seconds."""
    worker, box = in_thread(fn)
    worker.join(timeout)
    assert not worker.is_alive(), f"{fn} blocked for {timeout} s"
    if "error" in box:
        raise box["error"]
    return box["result"]
