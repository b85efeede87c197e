"""Real browser on a real Streamlit server: a replica turning DEGRADED on the Degradation page and
back to ok after the resync, through a real *partial* fault the dashboard itself survives.

The replica's own sessions hang (its backends SIGSTOPped: a stuck path between that replica and the
server), and another session holds `LOCK TABLE checkpoints IN ACCESS EXCLUSIVE MODE` inside an open
transaction (a migration gone wrong). The saver's liveness check does not answer, so it degrades,
cuts its blocked calls and buffers in memory; its probes and heartbeats (new sessions, another
table) get through and the dashboard still reads the health tables, but every resync waits on the
lock past its deadline, so the replica stays degraded. (A table lock alone is slow PostgreSQL, not an
outage: issue 16 finding 5, tests/test_saver_slow_vs_gone.py.) Rolling the lock back lets the saver
resync; the page shows the replica ok again and the episode with its resynced operations, and the
checkpoints buffered during the fault are in PostgreSQL. Nothing is mocked."""

from __future__ import annotations

import os
import signal
import threading
import time

import psycopg
import pytest
from apptools import wait_until
from conftest import DIMS, off_loop, start_streamlit, stop_streamlit
from playwright.sync_api import expect

from agent_memory_runtime.dual_saver import DualCheckpointSaver
from core.agents.retail import ContextoCliente, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.db import Database
from core.history import replica_health
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store

pytestmark = pytest.mark.browser

REPLICA = "replica-lock"
FAULT_THREAD = "cliente-C9-bloqueo"


def _metric_value(page, label: str):
    return page.get_by_test_id("stMetric").filter(has_text=label).get_by_test_id("stMetricValue")


def _replicas_grid(page):
    return page.get_by_test_id("stDataFrame").filter(has_text=REPLICA).first


def _cell(grid, column: str):
    """The first row's cell of `column` in a data grid (glide's accessible table: visible columns only)."""
    header = grid.locator("th[role=columnheader]", has_text=column)
    expect(header).to_have_count(1)
    return grid.locator(f'td[role=gridcell][aria-colindex="{header.get_attribute("aria-colindex")}"]').first


def hang_sessions_of(dsn: str, application_name: str) -> list[int]:
    """SIGSTOP the backends of every session with this application_name (the replica's own)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        pids = [
            r[0]
            for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application_name,))
        ]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    return pids


def resume(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def test_replica_degraded_by_a_table_lock_and_resynced(page, create_database, screenshot):
    started = time.monotonic()
    timings: dict[str, float] = {}
    dsn = create_database(prefix="degr_lock")
    db = Database(dsn)
    # resync_timeout 1 s: while the lock is held the probe (SELECT 1, a new session) answers, so every
    # recovery attempt replays (under the saver's lock, which the agents' buffering also takes) and
    # waits on the table lock until this deadline; 1 s keeps such waits short here. The replica's
    # sessions carry its name as application_name, so the fault can find them.
    saver = DualCheckpointSaver(
        psycopg.conninfo.make_conninfo(dsn, application_name=REPLICA),
        replica_id=REPLICA,
        call_timeout=1.0,
        heartbeat_interval=1.0,
        resync_timeout=1.0,
    )
    locker: psycopg.Connection | None = None
    hung: list[int] = []
    proc = None
    try:
        store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
        cliente = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=saver)
        off_loop(run_turn, cliente, ContextoCliente("C9"), "cliente-C9-1", "Hola, quería saber el estado de mi pedido.")
        wait_until(lambda: not replica_health.replicas(db).empty, timeout=10)

        proc, url = start_streamlit({"PG_AGENTES": dsn})
        page.set_viewport_size({"width": 1700, "height": 1400})  # glide draws only the columns in view
        page.goto(f"{url}/degradation")
        expect(page.get_by_role("heading", name="Persistencia degradada de las réplicas")).to_be_visible(timeout=30_000)
        expect(page.get_by_text("Todas las réplicas persisten en PostgreSQL.")).to_be_visible(timeout=15_000)
        expect(_metric_value(page, "Degradadas")).to_have_text("0")
        grid = _replicas_grid(page)
        expect(grid.get_by_text(REPLICA, exact=True)).to_be_attached()
        expect(_cell(grid, "Estado")).to_have_text("ok")
        expect(page.get_by_test_id("stException")).to_have_count(0)
        timings["page ok"] = time.monotonic() - started

        # the fault: a migration gone wrong holds the checkpoints table in an open transaction, and the
        # replica's open sessions hang
        locker = psycopg.connect(dsn)
        locker.execute("LOCK TABLE checkpoints IN ACCESS EXCLUSIVE MODE")
        fault_at = time.monotonic()
        hung = hang_sessions_of(dsn, REPLICA)
        assert hung, "the replica has no open session to hang"

        answer: dict = {}

        def turn() -> None:
            try:
                answer["result"] = run_turn(
                    cliente, ContextoCliente("C9"), FAULT_THREAD, "Prefiero que me atendáis en euskera."
                )
            except BaseException as exc:  # reported by the assertion below
                answer["error"] = exc

        worker = threading.Thread(target=turn, name="turn-during-lock", daemon=True)
        worker.start()
        assert saver.wait_for("degraded", 30), "the saver did not degrade when its sessions hung"
        timings["degraded after lock"] = time.monotonic() - fault_at
        worker.join(20)
        assert not worker.is_alive(), "the turn did not finish while the checkpoints table was locked"
        assert "error" not in answer, answer.get("error")
        assert answer["result"]["messages"][-1].content  # it answered, from the buffer
        timings["turn answered after lock"] = time.monotonic() - fault_at
        assert saver.degraded  # the lock is still held: nothing was resynced behind it
        status = saver.status()
        assert status["buffered_checkpoints"] > 0 and "deadline" in (status["reason"] or "").lower(), status
        buffered_ids = {
            t.config["configurable"]["checkpoint_id"]
            for t in off_loop(lambda: list(saver.list({"configurable": {"thread_id": FAULT_THREAD}})))
        }
        assert buffered_ids

        # the dashboard still reads the health tables; the fragment refreshes by itself (no reload)
        expect(_metric_value(page, "Degradadas")).to_have_text("1", timeout=15_000)
        expect(page.get_by_text("1 réplica degradada o silenciosa.")).to_be_visible()
        expect(_cell(_replicas_grid(page), "Estado")).to_have_text("degradada")
        expect(page.get_by_text("La base de datos no responde")).to_have_count(0)
        expect(_metric_value(page, "Sonda del panel")).to_contain_text("ms")
        # the ongoing episode is on the timeline (an ongoing bar alone once crashed the chart)
        expect(page.locator(".js-plotly-plot")).to_have_count(1, timeout=10_000)
        expect(page.locator(".js-plotly-plot").get_by_text("en curso").first).to_be_attached(timeout=10_000)
        expect(page.get_by_test_id("stException")).to_have_count(0)
        screenshot("degradation-replica-degraded")
        # the whole page renders while a replica is degraded (here: its first episode, nothing recorded yet)
        expect(page.get_by_test_id("stException")).to_have_count(0)
        row = replica_health.replicas(db).iloc[0]
        assert row["reported_state"] == "degraded" and row["state"] == "degraded"  # not silent: beats get through
        timings["page degraded after lock"] = time.monotonic() - fault_at

        locker.rollback()  # the migration is rolled back: the lock goes away
        released_at = time.monotonic()
        assert saver.wait_for("healthy", 10), f"no resync after the lock was released: {saver.status()}"
        timings["resynced after release"] = time.monotonic() - released_at
        wait_until(lambda: not replica_health.episodes(db).empty, timeout=10)
        episode = replica_health.episodes(db).iloc[0]
        assert episode["ops_resynced"] > 0 and episode["checkpoints_buffered"] == status["buffered_checkpoints"]

        expect(page.get_by_text("Todas las réplicas persisten en PostgreSQL.")).to_be_visible(timeout=15_000)
        expect(_metric_value(page, "Degradadas")).to_have_text("0")
        expect(_metric_value(page, "Episodios")).to_have_text("1")
        expect(_cell(_replicas_grid(page), "Estado")).to_have_text("ok")
        # the replicas table shows the last episode's resynced operations (its resynced_last_episode cell)
        expect(_cell(_replicas_grid(page), "Resincronizadas (último episodio)")).to_have_text(
            str(int(episode["ops_resynced"]))
        )
        grids = page.get_by_test_id("stDataFrame")
        expect(grids).to_have_count(2)  # replicas, then the recorded episodes
        grids.nth(1).scroll_into_view_if_needed()
        expect(grids.nth(1).get_by_text(REPLICA, exact=True)).to_be_attached(timeout=10_000)
        expect(page.locator(".js-plotly-plot")).to_have_count(1)
        expect(page.get_by_test_id("stException")).to_have_count(0)
        timings["page ok again after release"] = time.monotonic() - released_at
        screenshot("degradation-replica-resynced")

        # the checkpoints buffered during the fault are in PostgreSQL now
        with psycopg.connect(dsn) as conn:
            stored = {
                r[0]
                for r in conn.execute("SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s", (FAULT_THREAD,))
            }
        assert buffered_ids <= stored, buffered_ids - stored
        timings["total"] = time.monotonic() - started
        print("timings (s):", {k: round(v, 1) for k, v in timings.items()})
    finally:
        resume(hung)
        if locker is not None:
            locker.rollback()
            locker.close()
        saver.close()
        db.close()
        if proc is not None:
            stop_streamlit(proc)
