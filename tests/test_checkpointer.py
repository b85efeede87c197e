"""The dual checkpoint saver against real outages of a real embedded PostgreSQL of its own.

Fault tests: several agent threads converse while the server is stopped (`pg_ctl -m fast`) or
hung (postmaster and backends SIGSTOPped). The saver must degrade in time, the agents keep
answering, a HIGH tool is denied and a LOW one runs, and once the server is back the buffer is
resynced in time and PostgreSQL holds exactly the checkpoints of a control run without the
fault. The store (cross-thread memory) lives on the session server, which is never stopped, so
the LOW tool's write is real.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import psycopg
import pytest
from conftest import own_embedded_server
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver

from agent_memory_runtime.dual_saver import CheckpointUnavailable, DualCheckpointSaver, is_connection_failure
from agent_memory_runtime.serde import SerializationRefused, make_serializer
from core.agents.retail import ContextoCliente, ContextoProveedor, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.db import Database, make_pool
from core.history.replica_health import denials, episodes, refusals, replicas
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store
from core.migrate import migrate
from core.operations.outage import EmbeddedServerControl

DIMS = 64
AGENTS = 4
# Each customer thread's script: small talk, a LOW preference write, a READ_ONLY read, goodbye.
SCRIPT = [
    "Hola, quería saber el estado de mi pedido.",
    "Prefiero que me atendáis en catalán.",
    "¿Qué preferencias tengo guardadas?",
    "Por favor, contactadme siempre por WhatsApp.",
    "¿Puedo cambiar una prenda sin ticket?",
    "Gracias, eso es todo.",
]
BEFORE, DURING = 2, 2  # turns before the fault, turns that must run while degraded; the rest after


@pytest.fixture(scope="module")
def fault_server(tmp_path_factory):
    yield from own_embedded_server(tmp_path_factory, "checkpointer-faults")


def new_db(base: str) -> str:
    name = f"cp_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = psycopg.conninfo.make_conninfo(base, dbname=name)
    migrate(dsn, DIMS)
    return dsn


def thread_structure(dsn: str) -> dict[str, list[tuple]]:
    """Per thread, its checkpoints in order as (source, step, messages) with ids left out."""
    saver = PostgresSaver(make_pool(dsn, name="inspect"), serde=make_serializer())
    out: dict[str, list[tuple]] = {}
    try:
        with psycopg.connect(dsn) as conn:
            threads = [r[0] for r in conn.execute("SELECT DISTINCT thread_id FROM checkpoints ORDER BY 1")]
        for thread in threads:
            rows = []
            for t in reversed(list(saver.list({"configurable": {"thread_id": thread}}))):
                msgs = t.checkpoint["channel_values"].get("messages", [])
                rows.append(
                    (
                        t.metadata.get("source"),
                        t.metadata.get("step"),
                        tuple(
                            (
                                m.type,
                                m.content,
                                tuple(
                                    (c["name"], tuple(sorted(c["args"].items())))
                                    for c in getattr(m, "tool_calls", []) or []
                                ),
                            )
                            for m in msgs
                        ),
                    )
                )
            out[thread] = rows
    finally:
        saver.conn.close()
    return out


def chain_ids(dsn: str) -> dict[str, list[str]]:
    """Per thread, checkpoint ids in order; asserts every parent id is itself stored."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT thread_id, checkpoint_id, parent_checkpoint_id FROM checkpoints ORDER BY thread_id, checkpoint_id"
        ).fetchall()
    ids: dict[str, list[str]] = {}
    for thread, cid, _ in rows:
        ids.setdefault(thread, []).append(cid)
    for thread, cid, parent in rows:
        assert parent is None or parent in ids[thread], f"{thread}: parent {parent} of {cid} missing"
    return ids


def run_agents(saver, store, *, on_phase=None, answers=None, seen_ids=None) -> list[BaseException]:
    """AGENTS threads run SCRIPT; `on_phase(i, phase)` gates them between phases."""
    model = ScriptedChatModel()
    agent = build_agent("atencion-cliente", model, store=store, checkpointer=saver)
    errors: list[BaseException] = []

    def converse(i: int) -> None:
        cid, thread = f"C{i}", f"cliente-C{i}-1"
        try:
            for n, text in enumerate(SCRIPT):
                if on_phase is not None and n in (BEFORE, BEFORE + DURING):
                    on_phase(i, "during" if n == BEFORE else "after")
                result = run_turn(agent, ContextoCliente(cid), thread, text)
                if answers is not None:
                    answers.append((time.monotonic(), i, n, result["messages"][-1].content))
                if seen_ids is not None:
                    seen_ids.add(
                        agent.get_state({"configurable": {"thread_id": thread}}).config["configurable"]["checkpoint_id"]
                    )
        except BaseException as exc:  # reported by the test, never swallowed
            errors.append(exc)

    threads = [threading.Thread(target=converse, args=(i,), name=f"agent-{i}") for i in range(AGENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "an agent thread hung"
    return errors


@pytest.fixture
def stores(create_database):
    """Two stores on the session server (never stopped): one for the control run, one for the fault run."""
    pools, out = [], []
    for _ in range(2):
        pool = make_pool(create_database(), name="store")
        pools.append(pool)
        out.append(build_store(pool, OfflineHashEmbeddings(DIMS), DIMS))
    yield out
    for pool in pools:
        pool.close()


@pytest.mark.slow  # an outage drill
@pytest.mark.parametrize("kind", ["stop", "hang"])
def test_fault_agents_keep_answering_and_resync_exactly(fault_server, stores, kind, capsys):
    base, control = fault_server
    control_store, fault_store = stores

    # Control run: same script, no fault.
    control_dsn = new_db(base)
    with DualCheckpointSaver(control_dsn, heartbeat_interval=0.5, replica_id="control") as saver:
        assert not run_agents(saver, control_store)
        assert saver.status()["episodes_total"] == 0

    # Fault run.
    dsn = new_db(base)
    saver = DualCheckpointSaver(dsn, heartbeat_interval=0.5, replica_id=f"fault-{kind}")
    phase_lock = threading.Lock()
    reached = {"during": set(), "after": set()}
    go = {"during": threading.Event(), "after": threading.Event()}

    def on_phase(i: int, phase: str) -> None:
        with phase_lock:
            reached[phase].add(i)
        assert go[phase].wait(30), f"{phase} never came"

    answers: list[tuple] = []
    seen_ids: set[str] = set()
    result: dict = {}
    runner = threading.Thread(
        target=lambda: result.setdefault(
            "errors", run_agents(saver, fault_store, on_phase=on_phase, answers=answers, seen_ids=seen_ids)
        )
    )
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while len(reached["during"]) < AGENTS and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(reached["during"]) == AGENTS
        go["during"].set()  # the agents start their next turns now; the fault hits them in flight
        t_fault = time.monotonic()
        (control.stop if kind == "stop" else control.hang)()
        try:
            assert saver.wait_for("degraded", 60)  # while the server is still down or hung
            to_degraded = next(t for t, state in saver.transitions() if state == "degraded") - t_fault
            # While degraded: a HIGH tool is denied, a LOW tool runs (its store write is real).
            compras = build_agent("compras", ScriptedChatModel(), store=fault_store, checkpointer=saver)
            high = run_turn(
                compras,
                ContextoProveedor("P7"),
                "compras-P7-retraso",
                "aviso retraso: Los pedidos de vaqueros llegan con retraso de una semana",
            )
            low_agent = build_agent("atencion-cliente", ScriptedChatModel(), store=fault_store, checkpointer=saver)
            low = run_turn(
                low_agent, ContextoCliente("C99"), "cliente-C99-1", "Prefiero recoger mis pedidos en la tienda Sierpes."
            )
            deadline = time.monotonic() + 30
            while len(reached["after"]) < AGENTS and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(reached["after"]) == AGENTS, "agents did not keep answering while degraded"
            assert saver.degraded
        finally:
            t_back = time.monotonic()
            (control.start if kind == "stop" else control.resume)()
        assert saver.wait_for("healthy", 60)
        to_resynced = time.monotonic() - t_back
        go["after"].set()
        runner.join(60)
    finally:
        go["during"].set()
        go["after"].set()
        control.resume()
        runner.join(60)
    saver.close()
    assert result.get("errors") == [], result.get("errors")

    with capsys.disabled():
        print(
            f"\n    [{kind}] degraded after {to_degraded:.3f} s, resynced {to_resynced:.3f} s after the server "
            "was back; "
            f"{len([a for a in answers if t_fault <= a[0] <= t_back])} agent answers while degraded"
        )
    # The times are figures (bench.bench_checkpointer, BENCHMARKS.md), not asserted on this shared machine.
    during = [a for a in answers if t_fault <= a[0] <= t_back]
    assert len({a[1] for a in during}) == AGENTS  # every agent answered while degraded

    # HIGH denied with a message that says why; LOW ran and wrote the preference.
    tool_msg = next(m for m in high["messages"] if m.type == "tool")
    assert tool_msg.status == "error" and "degradada" in tool_msg.content and "HIGH" in tool_msg.content
    assert fault_store.get(("proveedores", "P7"), "aviso-retraso") is None
    low_tool = next(m for m in low["messages"] if m.type == "tool")
    assert low_tool.status != "error" and "Preferencia guardada" in low_tool.content
    assert fault_store.get(("clientes", "C99"), "pref-recogida").value["valor"] == "Sierpes"

    # PostgreSQL now holds exactly the control run's checkpoints, plus the two outage threads.
    fault_structure = thread_structure(dsn)
    control_structure = thread_structure(control_dsn)
    customer_threads = {f"cliente-C{i}-1" for i in range(AGENTS)}
    assert customer_threads <= set(fault_structure)
    for thread in customer_threads:
        assert fault_structure[thread] == control_structure[thread], thread
    ids = chain_ids(dsn)
    control_ids = chain_ids(control_dsn)
    assert {t: len(v) for t, v in ids.items() if t in customer_threads} == {
        t: len(v) for t, v in control_ids.items() if t in customer_threads
    }
    assert seen_ids <= {cid for v in ids.values() for cid in v}  # every id an agent saw is stored
    assert len(fault_structure["compras-P7-retraso"]) > 0 and len(fault_structure["cliente-C99-1"]) > 0

    # The episode and the denial are in the health tables.
    db = Database(dsn)
    ep = episodes(db)
    assert len(ep) == 1
    row = ep.iloc[0]
    assert row["replica_id"] == f"fault-{kind}" and row["checkpoints_buffered"] > 0 and row["ops_resynced"] > 0
    if kind == "hang":  # a hung server is detected by the liveness check's deadline (the watchdog cut it)
        assert "deadline" in row["reason"], row["reason"]
    assert [d["tool"] for d in row["denials"]] == ["publicar_aviso"]
    den = denials(db)
    assert list(den["tool"]) == ["publicar_aviso"] and list(den["risk"]) == ["HIGH"]
    assert den.iloc[0]["thread_id"] == "compras-P7-retraso" and den.iloc[0]["episode_id"] == row["id"]
    rep = replicas(db)
    assert rep.set_index("replica_id").loc[f"fault-{kind}", "reported_state"] == "stopped"


@pytest.mark.slow  # an outage drill
def test_async_path_degrades_on_hung_server_within_deadline(fault_server):
    """Native async: aput on a hung server returns at the deadline (not psycopg's ~10 s cancel)."""
    base, control = fault_server
    dsn = new_db(base)
    saver = DualCheckpointSaver(dsn, heartbeat_interval=0.5, call_timeout=1.0, replica_id="async-hang")
    agent = build_agent("atencion-cliente", ScriptedChatModel(), store=None, checkpointer=saver)
    config = {"configurable": {"thread_id": "async-1"}}

    async def turn(text: str) -> dict:
        return await agent.ainvoke(
            {"messages": [{"role": "user", "content": text}]}, config=config, context=ContextoCliente("A1")
        )

    async def scenario() -> str:
        await turn("Hola, quería saber el estado de mi pedido.")
        assert saver._postgres._async_entries, "the async path must use AsyncPostgresSaver"
        control.hang()
        try:
            result = await turn("Prefiero que me atendáis en euskera.")
            assert saver.degraded and result["messages"][-1].type == "ai"
            reason = saver.status()["reason"]
            state = await agent.aget_state(config)
            assert len(state.values["messages"]) == 6  # both turns: PostgreSQL's and the buffer's
        finally:
            control.resume()
        assert await asyncio.to_thread(saver.wait_for, "healthy", 60)
        await saver.aclose_loop()
        return reason

    try:
        reason = asyncio.run(scenario())
    finally:
        control.resume()
        saver.close()
    # Returned at the deadline (the watchdog cut the socket), not after psycopg's cancel path: the
    # reason says so. The times themselves are figures for bench.bench_checkpointer.
    assert "deadline" in reason, reason
    history = list(PostgresSaver(make_pool(dsn, name="inspect"), serde=make_serializer()).list(config))
    assert len(history[0].checkpoint["channel_values"]["messages"]) == 6


@pytest.mark.slow  # an outage drill
def test_degraded_reads_see_postgres_and_buffer(fault_server):
    base, control = fault_server
    dsn = new_db(base)
    saver = DualCheckpointSaver(dsn, heartbeat_interval=0.5, replica_id="reads")
    agent = build_agent("atencion-cliente", ScriptedChatModel(), store=None, checkpointer=saver)
    config = {"configurable": {"thread_id": "reads-1"}}
    try:
        run_turn(agent, ContextoCliente("R1"), "reads-1", "Hola, quería saber el estado de mi pedido.")
        before = agent.get_state(config)
        control.stop()
        try:
            # The first read after the failure already comes from what PostgreSQL had.
            state = agent.get_state(config)
            assert saver.degraded
            assert state.config["configurable"]["checkpoint_id"] == before.config["configurable"]["checkpoint_id"]
            assert len(state.values["messages"]) == 2
            run_turn(agent, ContextoCliente("R1"), "reads-1", "¿Puedo cambiar una prenda sin ticket?")
            state = agent.get_state(config)
            assert [m.content for m in state.values["messages"]][0] == "Hola, quería saber el estado de mi pedido."
            assert len(state.values["messages"]) == 4
            # History while degraded: the buffered checkpoints on top of PostgreSQL's latest.
            history = [h.config["configurable"]["checkpoint_id"] for h in agent.get_state_history(config)]
            assert history[-1] == before.config["configurable"]["checkpoint_id"] and len(history) >= 3
            # A past checkpoint this replica never held cannot be served: refused loudly, not faked.
            with pytest.raises(CheckpointUnavailable):
                saver.get_tuple(
                    {
                        "configurable": {
                            "thread_id": "reads-1",
                            "checkpoint_ns": "",
                            "checkpoint_id": "1ef00000-0000-6000-8000-000000000000",
                        }
                    }
                )
            with pytest.raises(CheckpointUnavailable):
                saver.prune(["reads-1"])
        finally:
            control.start()
        assert saver.wait_for("healthy", 10)
        state = agent.get_state(config)
        assert len(state.values["messages"]) == 4
    finally:
        saver.close()


def test_failed_resync_keeps_buffer_then_succeeds(db):
    """A resync that cannot commit (table locked past the resync deadline) keeps the buffer.

    The lock alone is slow PostgreSQL, not an outage (issue 16 finding 5): the put fails with the
    server-side lock_timeout and the saver stays healthy. The saver is then degraded by hand (as
    by an outage that ended); its probes answer but every resync waits on the lock past its
    deadline. Once the lock is released the resync goes through (the upserts: one row in the end).
    """
    saver = DualCheckpointSaver(
        db.dsn, heartbeat_interval=0.5, lock_timeout=0.5, resync_timeout=0.5, replica_id="resync-fail"
    )
    config = {"configurable": {"thread_id": "rf-1", "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    blocker = psycopg.connect(db.dsn)
    try:
        blocker.execute("LOCK TABLE checkpoints IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            saver.put(config, checkpoint, {"source": "input", "step": -1}, {})
        assert not saver.degraded and saver.status()["buffered_ops"] == 0
        saver._degrade("test: an outage that ended")
        saver.put(config, checkpoint, {"source": "input", "step": -1}, {})  # buffered
        deadline = time.monotonic() + 60  # probe + resync attempts, each failing on the lock
        while not saver.status()["last_resync_error"] and time.monotonic() < deadline:
            time.sleep(0.05)
        status = saver.status()
        assert saver.degraded and status["buffered_ops"] == 1 and status["last_resync_error"]
        assert saver.get_tuple(config).checkpoint["id"] == checkpoint["id"]  # still served from the buffer
        blocker.rollback()
        assert saver.wait_for("healthy", 10)
    finally:
        blocker.close()
        saver.close()
    assert db.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE thread_id = 'rf-1'")["n"] == 1
    assert len(episodes(db)) == 1


def test_data_errors_raise_and_do_not_degrade(db):
    with DualCheckpointSaver(db.dsn, replica_id="data-errors") as saver:
        with pytest.raises(psycopg.DataError):
            saver.put(
                {"configurable": {"thread_id": "bad\x00id", "checkpoint_ns": ""}},
                empty_checkpoint(),
                {"source": "input", "step": -1},
                {},
            )
        assert not saver.degraded
        assert not is_connection_failure(psycopg.errors.SerializationFailure())
        assert is_connection_failure(psycopg.errors.AdminShutdown())


def test_serializer_refusal_through_dual_saver_is_recorded(db, tmp_path):
    with DualCheckpointSaver(db.dsn, heartbeat_interval=0.3, replica_id="refusals") as saver:
        agent = build_agent("atencion-cliente", ScriptedChatModel(), store=None, checkpointer=saver)
        run_turn(agent, ContextoCliente("Z1"), "refused-1", "Hola, quería saber el estado de mi pedido.")
        sentinel = tmp_path / "SENTINEL"
        import ormsgpack

        blob = ormsgpack.packb([ormsgpack.Ext(0, ormsgpack.packb(["os", "system", f"touch {sentinel}"]))])
        db.execute(
            "UPDATE checkpoint_blobs SET blob = %s WHERE thread_id = 'refused-1' AND channel = 'messages'", (blob,)
        )
        with pytest.raises(SerializationRefused, match=r"os\.system"):
            agent.get_state({"configurable": {"thread_id": "refused-1"}})
        assert not saver.degraded and not sentinel.exists()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (refusals(db).empty or not saver.status()["refusals_by_type"]):
            time.sleep(0.1)
        assert saver.status()["refusals_by_type"] == {"os.system": 1}
    ref = refusals(db)
    assert list(ref["type_name"]) == ["os.system"] and ref.iloc[0]["thread_id"] == "refused-1"


def test_with_allowlist_clone_passes_serde_to_wrapped_savers(db):
    with DualCheckpointSaver(db.dsn, replica_id="allowlist") as saver:
        clone = saver.with_allowlist([("core.agents", "ContextoCliente")])
        assert clone is not saver and clone._health is saver._health and clone._monitor is saver._monitor
        assert clone.serde is not saver.serde and clone.serde.refusals is saver.serde.refusals
        assert ("core.agents", "ContextoCliente") in clone.serde._allowed_msgpack_modules
        assert clone._postgres.sync().serde is clone.serde and saver._postgres.sync().serde is saver.serde
        assert (
            clone._buffer._memory.serde is clone.serde
            and clone._buffer._memory.storage is saver._buffer._memory.storage
        )

        async def inner_async():
            try:
                return (await clone._postgres.async_saver()).serde
            finally:
                await clone.aclose_loop()

        assert asyncio.run(inner_async()) is clone.serde
        # State is shared: the guard on the original sees what the compiled graph's clone sees.
        clone._degrade("test: forced")
        assert saver.degraded
        assert saver.wait_for("healthy", 10)


def test_heartbeat_published_while_healthy(db):
    with DualCheckpointSaver(db.dsn, heartbeat_interval=0.2, replica_id="heartbeat"):
        deadline = time.monotonic() + 30
        rows = replicas(db)
        while time.monotonic() < deadline and (rows.empty or rows.iloc[0]["state"] != "healthy"):
            time.sleep(0.1)
            rows = replicas(db)
        first = rows.iloc[0]["last_heartbeat"]
        deadline = time.monotonic() + 30
        again = replicas(db).iloc[0]
        while again["last_heartbeat"] <= first and time.monotonic() < deadline:
            time.sleep(0.05)
            again = replicas(db).iloc[0]
    assert again["replica_id"] == "heartbeat" and again["host"] and again["pid"] > 0
    assert again["last_heartbeat"] > first and again["buffered_checkpoints"] == 0


@pytest.mark.slow  # a month of demo with real outages
def test_demo_seed_includes_real_outage_episodes_across_the_month(tmp_path):
    """The embedded default: the demo seed hangs its own server briefly three times and resyncs (a few
    seconds each); the saver dates each episode on its replayed day, 4 min, 38 min and 2 h 10 min long."""
    from datetime import UTC, datetime, timedelta

    from core.config import Settings
    from core.demo.operations import MonthPlan
    from core.demo.seed import ensure_demo

    settings = Settings(dsn=None, data_dir=tmp_path, embeddings_dims=DIMS, auto_migrate=True, seed_demo=True)
    db = Database.from_settings(settings)
    control = EmbeddedServerControl(tmp_path / "pg")
    try:
        migrate(db.dsn, DIMS)
        started = time.monotonic()
        midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        summary = ensure_demo(db, settings, customers=6, days=30)
        assert summary is not None and time.monotonic() - started < 90
        plan = MonthPlan.for_month(midnight, 30)
        ep = episodes(db).sort_values("degraded_from")
        assert len(ep) == 3 and set(ep["replica_id"]) == {"demo-seed"}
        assert [(r.degraded_from, r.degraded_to - r.degraded_from) for r in ep.itertuples()] == plan.outages
        assert [r.degraded_to - r.degraded_from for r in ep.itertuples()] == [
            timedelta(minutes=4),
            timedelta(minutes=38),
            timedelta(hours=2, minutes=10),
        ]
        assert ep["degraded_to"].max() - ep["degraded_from"].min() > timedelta(days=14)
        assert ep["degraded_to"].max() < midnight  # all in the past, whatever the hour
        assert (ep["checkpoints_buffered"] > 0).all() and (ep["ops_resynced"] > 0).all()
        assert [[d["tool"] for d in r] for r in ep["denials"]] == [["publicar_aviso"]] * 3
        den = denials(db).sort_values("denied_at")
        assert list(den["thread_id"]) == [f"compras-P001-caida-{n}-3" for n in (1, 2, 3)]
        # each denial inside its episode, at its replayed minute
        assert all(e.degraded_from < d < e.degraded_to for d, e in zip(den["denied_at"], ep.itertuples(), strict=True))
        threads = {
            r["thread_id"]
            for r in db.fetch("SELECT DISTINCT thread_id FROM checkpoints WHERE thread_id LIKE '%%caida%%'")
        }
        assert threads == {
            f"{t}-caida-{n}-{k}"
            for n in (1, 2, 3)
            for k, t in ((1, "cliente-C1"), (2, "cliente-C2"), (3, "compras-P001"))
        }
        rep = replicas(db).set_index("replica_id")
        assert rep.loc["demo-seed", "reported_state"] == "stopped" and rep.loc["demo-seed", "episodes_total"] == 3
    finally:
        control.resume()
        control.stop()  # our own server: never left running after the session
