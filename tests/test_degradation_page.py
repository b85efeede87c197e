"""AppTest of the Degradation page (SRE) through a real outage of the agents' PostgreSQL: a real
dual saver publishes its heartbeat, the embedded server is stopped (the page says the database
does not answer and keeps the last good reading), the agents keep answering degraded (the guard
denies a HIGH tool), the server comes back, the replica resyncs and the page shows the episode.
An embedded server of its own, so the outage never touches the session's server."""

from __future__ import annotations

import json
import time

import psycopg
import pytest
from apptools import chart_clock, decode, frame, grid_clock, metric, wait_until
from conftest import DIMS, dsn_for, free_port, own_embedded_server
from streamlit.testing.v1 import AppTest

from agent_memory_runtime import metrics
from agent_memory_runtime import replica_health as replica_writes
from agent_memory_runtime.dual_saver import DualCheckpointSaver
from core.agents.retail import ContextoCliente, ContextoProveedor, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.db import Database
from core.history import replica_health
from core.migrate import migrate

APP = "../dashboard.py"
PAGE = "app_pages/degradation.py"


@pytest.fixture(scope="module")
def outage_server(tmp_path_factory):
    yield from own_embedded_server(tmp_path_factory, "degradation-outage")


def test_empty_health_tables(create_database, app_env):
    app_env(create_database(prefix="degr_empty"))
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page(PAGE).run()
    assert not at.exception
    assert metric(at, "Réplicas activas") == "0" and metric(at, "Episodios") == "0"
    assert any("Ninguna réplica ha publicado" in i.value for i in at.info)
    assert any("Ningún episodio" in i.value for i in at.info)
    assert metric(at, "Sonda del panel").endswith("ms")


@pytest.mark.slow  # an outage drill
def test_replica_through_a_real_outage(outage_server, app_env, monkeypatch):
    base, control = outage_server
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute('CREATE DATABASE "degr_outage"')
    dsn = dsn_for(base, "degr_outage")
    migrate(dsn, DIMS)
    db = Database(dsn)
    saver = DualCheckpointSaver(dsn, heartbeat_interval=0.5, replica_id="replica-a")
    try:
        cliente = build_agent("atencion-cliente", ScriptedChatModel(), store=None, checkpointer=saver)
        compras = build_agent("compras", ScriptedChatModel(), store=None, checkpointer=saver)
        run_turn(cliente, ContextoCliente("C1"), "cliente-C1-1", "Hola, quería saber el estado de mi pedido.")
        wait_until(lambda: not replica_health.replicas(db).empty)

        app_env(dsn)
        at = AppTest.from_file(APP, default_timeout=60)
        at.run()
        at.switch_page(PAGE).run()
        assert not at.exception
        summary = replica_health.summary(db)
        assert metric(at, "Réplicas activas") == str(summary["replicas"]) == "1"
        assert metric(at, "Degradadas") == "0" and metric(at, "Episodios") == "0"
        replicas = frame(at, "replica_id", "state", "buffered_writes", "heartbeat_age_s")
        assert replicas["replica_id"].tolist() == ["replica-a"] and replicas["state"].tolist() == ["ok"]
        assert any("Todas las réplicas persisten" in s.value for s in at.success)
        read_at = next(c.value for c in at.caption if c.value.startswith("Leído a las"))

        control.stop()  # the real outage
        try:
            assert saver.wait_for("degraded", 10)
            denied = run_turn(
                compras, ContextoProveedor("P1"), "compras-P1-retraso", "aviso retraso: Los vaqueros llegan con retraso"
            )  # HIGH: the guard denies it
            assert "deneg" in str(denied["messages"][-1].content).lower() or saver.status()["denials_total"] >= 1
            run_turn(
                cliente, ContextoCliente("C1"), "cliente-C1-1", "Prefiero que me atendáis en catalán."
            )  # LOW: runs, buffered
            # the page shares one sample among its sessions per SHARE_S (2 s, app_pages/degradation.py), shown with
            # its time: the next run after that takes a new one, during the outage
            time.sleep(2.1)
            at.run()
            assert not at.exception
            errors = [e.value for e in at.error]
            assert any(
                "La base de datos no responde" in e and read_at.removeprefix("Leído a las ") in e for e in errors
            ), errors
            # still readable: the last good reading, and the dashboard's own probe says no answer
            assert metric(at, "Réplicas activas") == "1" and metric(at, "Sonda del panel") == "sin respuesta"
            assert frame(at, "replica_id", "state")["replica_id"].tolist() == ["replica-a"]
            # Honest: the tables cannot be read, so the replica is unknown (or silent once its heartbeat
            # is overdue), with the age of the reading; never ok, and no green all-clear.
            shown = frame(at, "replica_id", "state", "reading_age_s", "heartbeat_age_s")
            assert shown["state"].tolist()[0] in ("desconocido", "silenciosa"), shown
            assert shown["reading_age_s"].tolist()[0].total_seconds() > 0  # a duration the grid sorts as one
            assert not at.success and metric(at, "Desconocidas") in ("0", "1")
            assert any("estado desconocido" in w.value or "silenciosa" in w.value for w in at.warning)
            # With the replica's metrics endpoint configured, the page reads it directly: degraded, live.
            port = free_port()
            assert metrics.start_metrics_server(saver, port, addr="127.0.0.1")
            monkeypatch.setenv("AGENT_METRICS_URLS", f"http://127.0.0.1:{port}/metrics")
            at.run()
            assert not at.exception and not at.success
            shown = frame(at, "replica_id", "state", "source", "buffered_writes")
            assert shown["state"].tolist() == ["degradada"] and shown["source"].tolist() == ["endpoint de métricas"]
            assert metric(at, "Degradadas") == "1"
            monkeypatch.delenv("AGENT_METRICS_URLS")
        finally:
            control.start()
        assert saver.wait_for("healthy", 15)
        wait_until(lambda: not replica_health.episodes(db).empty and not replica_health.denials(db).empty)

        time.sleep(2.1)  # past the shared sample taken during the outage (SHARE_S)
        at.run()
        assert not at.exception
        assert not at.error
        summary = replica_health.summary(db)
        assert metric(at, "Episodios") == str(summary["episodes"]) == "1"
        assert metric(at, "Denegaciones del guardián") == str(summary["denials"])
        assert metric(at, "Degradadas") == "0"
        episode = replica_health.episodes(db).iloc[0]
        shown = frame(at, "degraded_from", "degraded_to", "ops_resynced")
        assert shown["ops_resynced"].tolist() == [episode["ops_resynced"]] and episode["ops_resynced"] > 0
        denials = frame(at, "tool", "risk", "thread_id")
        assert "publicar_aviso" in set(denials["tool"]) and set(denials["risk"]) <= {"ALTO", "CRÍTICO"}
        assert "compras-P1-retraso" in set(denials["thread_id"])
        replicas = frame(at, "replica_id", "state", "resynced_last_episode")
        assert replicas["state"].tolist() == ["ok"]
        assert replicas["resynced_last_episode"].tolist() == [episode["ops_resynced"]]
        assert len(at.get("plotly_chart")) == 1
    finally:
        saver.close()


def test_a_replica_degraded_now_next_to_a_recorded_episode(db, app_env):
    """An ongoing degradation (heartbeat 'degraded') and a resynced episode on one timeline: the
    ongoing bar's end ("now") and the database's timestamps must plot together."""
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC)
    with db.connection() as conn:
        replica_writes.write_episode(
            conn,
            replica_writes.Episode(
                replica_id="r-old",
                host="h",
                pid=1,
                degraded_from=now - timedelta(minutes=9),
                degraded_to=now - timedelta(minutes=8),
                reason="OperationalError: consuming input failed: server closed the connection unexpectedly",
                checkpoints_buffered=3,
                writes_buffered=5,
                ops_resynced=8,
                resync_ms=4.0,
            ),
        )
        replica_writes.publish_heartbeat(
            conn,
            {
                "replica_id": "r-now",
                "host": "h",
                "pid": 2,
                "state": "degraded",
                "degraded_since": now - timedelta(seconds=30),
                "buffered_checkpoints": 4,
                "buffered_writes": 6,
                "last_success": now - timedelta(seconds=31),
                "started_at": now - timedelta(hours=1),
                "heartbeat_interval_s": 2.0,
                "episodes_total": 0,
                "denials_total": 0,
                "refusals_total": 0,
            },
        )
    app_env(db.dsn)
    at = AppTest.from_file(APP, default_timeout=60)
    at.context["timezone"] = "America/New_York"  # a browser five or four hours behind UTC
    at.run()
    at.switch_page(PAGE).run()
    assert not at.exception
    assert metric(at, "Degradadas") == "1"
    spec = at.get("plotly_chart")[0].proto.spec
    assert "r-now" in spec and "r-old" in spec
    # one time zone on the page: the episode's bar starts at the clock time its row in the table shows
    fig = json.loads(spec)
    starts = {r: chart_clock(tr["base"]) for tr in fig["data"] for r in decode(tr["y"])}
    assert (
        grid_clock(at, "degraded_from", "n")
        == starts["r-old"]
        != [
            f"{now - timedelta(minutes=9):%Y-%m-%d %H:%M:%S}"  # (not the UTC clock)
        ]
    )
    assert fig["layout"]["xaxis"]["title"]["text"] == "Fecha y hora (America/New_York)"
    assert all("(America/New_York)=%{base" in tr["hovertemplate"] for tr in fig["data"])
    # the reason in Spanish words, the driver's text verbatim beside it
    episodes = frame(at, "degraded_from", "n", "reason")
    assert episodes["reason"].tolist() == ["PostgreSQL no responde (conexión rechazada o perdida)"]
    assert episodes["reason_raw"].tolist() == [
        "OperationalError: consuming input failed: server closed the connection unexpectedly"
    ]


@pytest.mark.parametrize(
    "lang, active, stopped_label, defined",
    [
        ("es", "Réplicas activas", "parada", "**parada** (cerró su checkpointer"),
        ("en", "Active replicas", "stopped", "**stopped** (it closed its checkpointer"),
    ],
)
def test_a_stopped_replica_is_listed_defined_and_not_counted_as_active(
    db, app_env, lang, active, stopped_label, defined
):
    """Issue 54 finding 8: the tile read "Réplicas 1" over a table of two (`demo-replica-1 ok`, `demo-seed parada`)
    and "parada" was defined nowhere. The tile names what it counts (active), its help the table's total and the
    stopped ones, and the caption defines the stopped state. Two real dual savers; one closed (its last heartbeat)."""
    running = DualCheckpointSaver(db.dsn, heartbeat_interval=0.5, replica_id="demo-replica-1")
    closed = DualCheckpointSaver(db.dsn, heartbeat_interval=0.5, replica_id="demo-seed")
    try:
        wait_until(lambda: len(replica_health.replicas(db)) == 2)
        closed.close()
        wait_until(lambda: set(replica_health.replicas(db)["reported_state"]) == {"healthy", "stopped"})
        app_env(db.dsn)
        at = AppTest.from_file(APP, default_timeout=60)
        at.query_params["lang"] = lang
        at.run()
        at.switch_page(PAGE).run()
        assert not at.exception
        tile = next(m for m in at.metric if m.label == active)
        assert tile.value == "1" and "2" in tile.help and "1" in tile.help, tile.help
        shown = frame(at, "replica_id", "state").set_index("replica_id")["state"].to_dict()
        assert shown == {"demo-replica-1": "ok", "demo-seed": stopped_label}
        assert any(defined in c.value for c in at.caption), [c.value for c in at.caption]
    finally:
        closed.close()
        running.close()


def test_a_degradation_reason_is_named_by_its_kind():
    """The saver's reasons ("<type>: ...", the liveness thread's "liveness check: <type>: ...") in words' kinds."""
    from agent_memory_runtime.failures import reason_kind

    assert reason_kind("liveness check: DeadlineExceeded: SELECT 1 took more than 2 s") == "deadline"
    assert reason_kind("OperationalError: consuming input failed: server closed the connection") == "unreachable"
    assert reason_kind("PoolTimeout: couldn't get a connection after 2.00 sec") == "pool"
    assert reason_kind("ValueError: something else") == reason_kind(None) == "other"
