"""Issue 16 finding 5: "PostgreSQL is slow" is not "PostgreSQL is gone".

On a real embedded server of its own: a table lock held by another session, a slow trigger and a
long `list` of a big thread are slow PostgreSQL. The saver must not degrade for them (so the guard
denies nothing): the call waits, or fails with a query error raised to the caller (the server-side
`statement_timeout` / `lock_timeout`). A hung server (SIGSTOP) is gone: the liveness check on the
monitor's own connection degrades the saver and the watchdog cuts the calls blocked on it.
"""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest
from conftest import own_embedded_server
from langgraph.checkpoint.base import empty_checkpoint

from agent_memory_runtime.dual_saver import DualCheckpointSaver, is_connection_failure
from core.agents.retail import ContextoProveedor, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.migrate import migrate

pytestmark = pytest.mark.slow  # locks held for seconds, hangs, on a server of its own

DIMS = 64
HIGH_TURN = "aviso retraso: Los pedidos de vaqueros llegan con retraso de una semana"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from own_embedded_server(tmp_path_factory, "saver-slow-vs-gone")


@pytest.fixture
def dsn(server):
    base, control = server
    control.resume()
    name = f"sg_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    out = psycopg.conninfo.make_conninfo(base, dbname=name)
    migrate(out, DIMS)
    return out


def never_degraded(saver: DualCheckpointSaver) -> bool:
    return [state for _, state in saver.transitions()] == ["healthy"] and not saver.degraded


def config_of(thread: str) -> dict:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def hold_lock(dsn: str, seconds: float, taken: threading.Event, table: str = "checkpoints") -> threading.Thread:
    """Another session takes ACCESS EXCLUSIVE on `table` and keeps it for `seconds`."""

    def run() -> None:
        with psycopg.connect(dsn) as conn:
            conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
            taken.set()
            time.sleep(seconds)  # the scenario: a lock held this long (e.g. a migration), not a wait
            conn.rollback()

    holder = threading.Thread(target=run, daemon=True)
    holder.start()
    assert taken.wait(30)
    return holder


def slow_or_done(fn) -> BaseException | None:
    """Run `fn`; a query error (server-side timeout) is an allowed outcome, returned; None if it ran."""
    try:
        fn()
    except psycopg.Error as exc:
        assert not is_connection_failure(exc), exc
        return exc
    return None


def test_a_table_lock_held_4_s_does_not_degrade_nor_deny_high_tools(dsn):
    """The agent's calls wait behind the lock (or fail with a lock/statement timeout), the saver
    stays healthy throughout, and the HIGH tool runs: a lock is slow PostgreSQL, not an outage."""
    with DualCheckpointSaver(dsn, heartbeat_interval=0.3, replica_id="f5-lock") as saver:
        agent = build_agent("compras", ScriptedChatModel(), store=None, checkpointer=saver)
        run_turn(agent, ContextoProveedor("P5"), "compras-P5-1", "Hola")
        for n in range(3):
            saver.put(config_of(f"f5-lock-{n}"), empty_checkpoint(), {"source": "input", "step": -1}, {})

        holder = hold_lock(dsn, 4.0, threading.Event())
        outcomes: dict[str, object] = {}

        def plain_calls(n: int) -> None:  # other agent threads queue on the saver's own lock
            config = config_of(f"f5-lock-{n}")
            outcomes[f"put-{n}"] = slow_or_done(
                lambda: saver.put(config, empty_checkpoint(), {"source": "loop", "step": n}, {})
            )
            outcomes[f"get-{n}"] = slow_or_done(lambda: saver.get_tuple(config))
            outcomes[f"list-{n}"] = slow_or_done(lambda: list(saver.list(config)))

        threads = [threading.Thread(target=plain_calls, args=(n,)) for n in range(3)]
        for thread in threads:
            thread.start()
        turn: dict = {}
        outcomes["turn"] = slow_or_done(
            lambda: turn.setdefault("result", run_turn(agent, ContextoProveedor("P5"), "compras-P5-2", HIGH_TURN))
        )
        for thread in threads:
            thread.join(60)
        holder.join(60)
        assert len(outcomes) == 10, outcomes
        assert never_degraded(saver), saver.status()["reason"]
        assert saver.status()["denials_total"] == 0
        if "result" in turn:  # it waited for the lock: the HIGH tool ran, not denied
            tool_msg = next(m for m in turn["result"]["messages"] if m.type == "tool")
            assert tool_msg.status != "error" and "degradada" not in tool_msg.content
        # Once the lock is gone everything works as before.
        run_turn(agent, ContextoProveedor("P5"), "compras-P5-3", HIGH_TURN)
        assert never_degraded(saver) and saver.status()["denials_total"] == 0


def test_a_locked_health_table_does_not_degrade_the_monitor(dsn):
    """The monitor's heartbeat waits behind a lock on its table (e.g. a migration): slow, not gone.
    (Found: the heartbeat's 2 s deadline degraded the saver, and HIGH tools were denied.)"""

    def beats_since(after) -> int:
        with psycopg.connect(dsn) as conn:
            return conn.execute(
                "SELECT count(*) FROM core_replica_heartbeat WHERE replica_id = 'f5-beat' AND updated_at > %s", (after,)
            ).fetchone()[0]

    with DualCheckpointSaver(dsn, heartbeat_interval=0.2, replica_id="f5-beat") as saver:
        saver.put(config_of("f5-beat"), empty_checkpoint(), {"source": "input", "step": -1}, {})
        hold_lock(dsn, 4.0, threading.Event(), table="core_replica_heartbeat").join(60)
        with psycopg.connect(dsn) as conn:
            released = conn.execute("SELECT now()").fetchone()[0]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not beats_since(released):
            time.sleep(0.05)
        assert beats_since(released) == 1  # the monitor beats again
        assert never_degraded(saver), saver.status()["reason"]


SLOW_TRIGGER = """
CREATE FUNCTION core_test_slow() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN PERFORM pg_sleep(3); RETURN NEW; END $$;
CREATE TRIGGER core_test_slow BEFORE INSERT ON checkpoints FOR EACH ROW EXECUTE FUNCTION core_test_slow();
"""


def test_a_slow_statement_waits_and_statement_timeout_fails_it_without_degrading(dsn):
    """A put that takes 3 s server-side (a trigger sleeping) is slow, not gone: it completes. Past
    the server-side statement_timeout it fails with QueryCanceled, raised to the caller; no outage."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SLOW_TRIGGER)
    with DualCheckpointSaver(dsn, heartbeat_interval=0.3, replica_id="f5-slow") as saver:
        checkpoint = empty_checkpoint()
        saver.put(config_of("f5-slow"), checkpoint, {"source": "input", "step": -1}, {})
        assert saver.get_tuple(config_of("f5-slow")).checkpoint["id"] == checkpoint["id"]
        assert never_degraded(saver), saver.status()["reason"]
    with DualCheckpointSaver(dsn, heartbeat_interval=0.3, statement_timeout=1.0, replica_id="f5-timeout") as saver:
        with pytest.raises(psycopg.errors.QueryCanceled):
            saver.put(config_of("f5-timeout"), empty_checkpoint(), {"source": "input", "step": -1}, {})
        assert never_degraded(saver), saver.status()["reason"]
        assert saver.get_tuple(config_of("f5-timeout")) is None  # nothing half-written, nothing buffered
        assert saver.status()["buffered_ops"] == 0


BIG_THREAD = 10_000  # its list takes ~4 s here (mostly loading the payloads)


def big_thread(dsn: str, saver: DualCheckpointSaver, thread: str) -> None:
    """A real agent checkpoint, then BIG_THREAD more of it under new ids (one INSERT ... SELECT)."""
    agent = build_agent("compras", ScriptedChatModel(), store=None, checkpointer=saver)
    for text in ("Hola", "¿Qué pedidos tengo pendientes?"):
        run_turn(agent, ContextoProveedor("P6"), thread, text)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            """
            INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type,
                                     checkpoint, metadata)
            SELECT c.thread_id, c.checkpoint_ns, new_id, c.checkpoint_id, c.type,
                   jsonb_set(c.checkpoint, '{id}', to_jsonb(new_id)), c.metadata
            FROM (SELECT * FROM checkpoints WHERE thread_id = %s ORDER BY checkpoint_id DESC LIMIT 1) c,
                 LATERAL (SELECT '1f0ff000-0000-6000-8000-' || lpad(n::text, 12, '0') AS new_id
                          FROM generate_series(1, %s) n) ids
        """,
            (thread, BIG_THREAD),
        )
        conn.execute("ANALYZE checkpoints")


def test_a_long_list_of_a_big_thread_is_not_cut(dsn, capsys):
    """`list` of a whole long thread while the server answers: it returns every checkpoint, however
    long it takes, and a put queued behind it on the saver's lock waits; neither is an outage.
    (Found: the queued put's wait for the lock counted against its 2 s deadline and degraded the saver.)"""
    with DualCheckpointSaver(dsn, heartbeat_interval=0.3, replica_id="f5-list") as saver:
        big_thread(dsn, saver, "f5-big")
        queued: dict = {}
        started = threading.Event()

        def put_behind() -> None:  # once the list holds the saver's lock
            assert started.wait(30)
            deadline = time.monotonic() + 30
            while not saver._postgres.sync().lock.locked() and time.monotonic() < deadline and other_list.is_alive():
                time.sleep(0.001)
            queued["config"] = saver.put(config_of("f5-other"), empty_checkpoint(), {"source": "input", "step": -1}, {})

        listed: dict = {}

        def whole_list() -> None:
            t0 = time.monotonic()
            listed["n"] = sum(1 for _ in saver.list({"configurable": {"thread_id": "f5-big"}}))
            listed["took"] = time.monotonic() - t0

        other_list = threading.Thread(target=whole_list)
        other = threading.Thread(target=put_behind)
        other_list.start()
        other.start()
        started.set()
        other_list.join(120)
        other.join(60)
        found, took = listed["n"], listed["took"]
        with capsys.disabled():
            print(f"\n    list of {found} checkpoints took {took:.2f} s")
        assert found >= BIG_THREAD + 2
        assert never_degraded(saver), saver.status()["reason"]
        assert "config" in queued


def test_a_hung_server_still_degrades_and_cuts_the_call_in_flight(dsn, server):
    """Gone, not slow: with no other traffic, the liveness check degrades the saver on a hang and a
    `list` blocked on the hung server returns (from the degraded read path) before the resume."""
    control = server[1]
    with DualCheckpointSaver(dsn, heartbeat_interval=0.3, replica_id="f5-hang") as saver:
        saver.put(config_of("f5-hang"), empty_checkpoint(), {"source": "input", "step": -1}, {})
        listed: dict = {}
        control.hang()
        try:
            lister = threading.Thread(
                target=lambda: listed.setdefault(
                    "n", sum(1 for _ in saver.list({"configurable": {"thread_id": "f5-hang"}}))
                )
            )
            lister.start()
            assert saver.wait_for("degraded", 30)
            lister.join(30)
            assert not lister.is_alive() and "n" in listed  # returned while the server is still hung
            assert "deadline" in saver.status()["reason"], saver.status()["reason"]
        finally:
            control.resume()
        assert saver.wait_for("healthy", 60)
