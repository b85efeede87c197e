"""The sweep job on the real embedded PostgreSQL: exact TTL sweeps, refresh on read, the advisory
lock, checkpoint retention, the sweep log and bad input. Rows are written through the real put
path and threads by the real agents; nothing is mocked."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from conftest import ROOT
from langgraph.checkpoint.postgres import PostgresSaver

from core.agents.retail import ContextoCliente, ContextoEmpleado, ContextoProveedor, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.capture.follower import catch_up
from core.db import Database
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store, get_memory, put_memory
from core.operations import sweep, sweep_cli, sweep_reads

DIMS = 64
FLASH = 0.005  # minutes (0.3 s): the shortest validity a document can be given through the API


FLASH_LEFT = (
    "SELECT NOT EXISTS (SELECT 1 FROM store WHERE expires_at > now() AND expires_at < now() + interval '1 minute')"
    " AS gone"
)


def wait_expired(db: Database) -> None:
    """Until every document written with a validity of FLASH has expired on the database's clock (the one the sweep
    reads), polled: a fixed 0.4-0.5 s before."""
    deadline = time.monotonic() + 10
    while not db.fetch_one(FLASH_LEFT)["gone"]:
        assert time.monotonic() < deadline, "a FLASH document did not expire"
        time.sleep(0.01)


@pytest.fixture
def store(db):
    return build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)


def rows(db: Database) -> set[tuple[str, str]]:
    return {(r["prefix"], r["key"]) for r in db.fetch("SELECT prefix, key FROM store")}


def vectors(db: Database) -> set[tuple[str, str, str]]:
    return {
        (r["prefix"], r["key"], r["field_name"]) for r in db.fetch("SELECT prefix, key, field_name FROM store_vectors")
    }


def log_rows(db: Database) -> list[dict]:
    return db.fetch("SELECT * FROM core_sweep_log ORDER BY id")


def thread_rows(db: Database) -> dict[str, dict[str, int]]:
    """Rows per table per thread in the three checkpoint tables."""
    out: dict[str, dict[str, int]] = {}
    for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
        for r in db.fetch(f"SELECT thread_id, count(*) AS n FROM {table} GROUP BY 1"):
            out.setdefault(r["thread_id"], {})[table] = r["n"]
    return out


def test_sweep_deletes_exactly_the_expired_rows_and_their_vectors(db, store):
    # Expired: two flash supplier notices, one customer document given a short validity, and one
    # supplier document without the indexed field `texto` (so it has no vector).
    put_memory(
        store,
        ("proveedores", "P1"),
        "aviso-retraso",
        {"tema": "retraso", "texto": "retraso de abrigos"},
        valid_for_minutes=FLASH,
    )
    put_memory(
        store,
        ("proveedores", "P2"),
        "aviso-promocion",
        {"tema": "promocion", "texto": "promo vaqueros"},
        valid_for_minutes=FLASH,
    )
    put_memory(store, ("proveedores", "P2"), "aviso-sin-texto", {"tema": "retraso"}, valid_for_minutes=FLASH)
    put_memory(
        store,
        ("clientes", "C1"),
        "pref-idioma",
        {"tipo": "idioma", "valor": "M", "texto": "idioma: catalán"},
        valid_for_minutes=FLASH,
    )
    # Live: same namespaces and other roots, with their policy TTL.
    put_memory(store, ("proveedores", "P1"), "aviso-promocion", {"tema": "promocion", "texto": "promo mochilas"})
    put_memory(store, ("clientes", "C1"), "pref-contacto", {"tipo": "contacto", "texto": "contacto: SMS"})
    put_memory(store, ("clientes", "C2"), "pref-idioma", {"tipo": "idioma", "texto": "idioma: euskera"})
    put_memory(store, ("empleados", "E1"), "ajuste-turno", {"ajuste": "turno", "texto": "turno: tarde"})
    wait_expired(db)

    expired = {
        ("proveedores.P1", "aviso-retraso"),
        ("proveedores.P2", "aviso-promocion"),
        ("proveedores.P2", "aviso-sin-texto"),
        ("clientes.C1", "pref-idioma"),
    }
    before_rows, before_vectors = rows(db), vectors(db)
    assert expired < before_rows
    expired_vectors = {v for v in before_vectors if v[:2] in expired}
    assert len(expired_vectors) == 3

    result = sweep.run_sweep(db, trigger="manual", retention_days=30, operator="sre@example.com")

    assert result.status == "ok", result.error
    assert rows(db) == before_rows - expired
    assert vectors(db) == before_vectors - expired_vectors
    assert result.documents_deleted == 4 and result.vectors_deleted == 3
    assert result.deleted_by_root == {"proveedores": 3, "clientes": 1}
    (logged,) = log_rows(db)
    assert logged["id"] == result.run_id and logged["status"] == "ok" and logged["trigger"] == "manual"
    assert logged["operator"] == "sre@example.com" and logged["host"]
    assert (logged["documents_deleted"], logged["vectors_deleted"]) == (4, 3)
    assert logged["deleted_by_root"] == {"proveedores": 3, "clientes": 1}
    assert logged["started_at"] <= logged["finished_at"]

    # Nothing left to sweep: a second run deletes nothing and is logged too.
    again = sweep.run_sweep(db, trigger="scheduled")
    assert (again.status, again.documents_deleted, again.vectors_deleted, again.deleted_by_root) == ("ok", 0, 0, {})
    assert rows(db) == before_rows - expired
    assert [r["trigger"] for r in log_rows(db)] == ["manual", "scheduled"]


def test_dry_run_counts_the_expired_rows_and_deletes_nothing(db, store):
    put_memory(store, ("proveedores", "P1"), "aviso-retraso", {"texto": "retraso"}, valid_for_minutes=FLASH)
    put_memory(store, ("empleados", "E1"), "ajuste-idioma", {"texto": "idioma: es"})
    wait_expired(db)
    before_rows, before_vectors = rows(db), vectors(db)
    result = sweep.run_sweep(db, trigger="manual", dry_run=True)
    assert result.status == "dry_run"
    assert (result.documents_deleted, result.vectors_deleted, result.deleted_by_root) == (1, 1, {"proveedores": 1})
    assert rows(db) == before_rows and vectors(db) == before_vectors
    assert log_rows(db)[-1]["status"] == "dry_run" and log_rows(db)[-1]["dry_run"] is True


def test_rows_refreshed_on_read_survive_the_sweep(db, store):
    put_memory(store, ("clientes", "C1"), "pref-idioma", {"tipo": "idioma", "texto": "idioma: catalán"})
    put_memory(store, ("clientes", "C2"), "pref-idioma", {"tipo": "idioma", "texto": "idioma: gallego"})
    put_memory(store, ("proveedores", "P1"), "aviso-retraso", {"tema": "retraso", "texto": "retraso de mochilas"})
    put_memory(store, ("empleados", "E1"), "ajuste-turno", {"ajuste": "turno", "texto": "turno: tarde"})
    # Simulate the end of their TTL (a year for clientes, 90 days for proveedores...) without waiting
    # for it: the rows were written by the real put path with their policy TTL (`ttl_minutes`), only
    # their due time is moved to ten minutes from now. A TTL short enough to wait for cannot be used:
    # `ttl_minutes` is an INT column, so a refresh of a sub-minute TTL would expire the row at once.
    db.execute("UPDATE store SET expires_at = now() + interval '10 minutes'")
    # Read before they expire: clientes and empleados refresh on read, proveedores do not.
    assert get_memory(store, ("clientes", "C1"), "pref-idioma") is not None
    assert get_memory(store, ("proveedores", "P1"), "aviso-retraso") is not None
    assert get_memory(store, ("empleados", "E1"), "ajuste-turno") is not None
    # Then eleven minutes pass for every row alike (no wall-clock window the reads must land in).
    db.execute("UPDATE store SET expires_at = expires_at - interval '11 minutes'")

    result = sweep.run_sweep(db, trigger="manual")

    assert result.status == "ok", result.error
    assert rows(db) == {("clientes.C1", "pref-idioma"), ("empleados.E1", "ajuste-turno")}
    assert result.deleted_by_root == {"clientes": 1, "proveedores": 1}
    left = db.fetch_one(
        "SELECT (expires_at - now()) > interval '364 days' AS renewed FROM store WHERE prefix = 'clientes.C1'"
    )
    assert left["renewed"]


def test_two_sweeps_started_together_exactly_one_works(db, store):
    put_memory(store, ("proveedores", "P1"), "aviso-retraso", {"texto": "retraso"}, valid_for_minutes=FLASH)
    wait_expired(db)
    barrier = threading.Barrier(2)
    first_finished = threading.Event()
    results: list[sweep.SweepResult] = []

    def hold(stage: str, fraction: float, detail: str) -> None:
        # The run holding the lock waits until the other one has returned, so they truly overlap.
        if stage == "locked":
            assert first_finished.wait(10)

    def worker() -> None:
        barrier.wait()
        results.append(sweep.run_sweep(Database(db.dsn), trigger="scheduled", on_step=hold))
        first_finished.set()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(20)

    assert sorted(r.status for r in results) == ["locked", "ok"]
    worked = next(r for r in results if r.status == "ok")
    refused = next(r for r in results if r.locked)
    assert worked.documents_deleted == 1 and refused.documents_deleted == 0
    assert "already running" in refused.summary() and refused.error == "already running"
    logged = {r["id"]: r for r in log_rows(db)}
    assert logged[refused.run_id]["status"] == "locked" and "already running" in logged[refused.run_id]["error"]
    assert logged[worked.run_id]["status"] == "ok"
    assert rows(db) == set()


def test_cli_reports_already_running_and_exits_0_while_another_holds_the_lock(db, monkeypatch, capsys):
    monkeypatch.setenv("PG_AGENTES", db.dsn)
    monkeypatch.setenv("EMBEDDINGS_DIMS", str(DIMS))
    with db.connection() as holder:
        assert holder.execute("SELECT pg_try_advisory_lock(%s) AS ok", (sweep.SWEEP_LOCK_ID,)).fetchone()["ok"]
        try:
            assert sweep_cli.main(["--trigger", "scheduled"]) == 0
        finally:
            holder.execute("SELECT pg_advisory_unlock(%s)", (sweep.SWEEP_LOCK_ID,))
    assert "already running" in capsys.readouterr().out
    assert [r["status"] for r in log_rows(db)] == ["locked"]
    # Lock released: the next scheduled run works.
    assert sweep_cli.main([]) == 0
    assert "sweep run" in capsys.readouterr().out
    assert [r["status"] for r in log_rows(db)] == ["locked", "ok"]


def converse(db: Database, store) -> None:
    saver = PostgresSaver(db.pool)
    model = ScriptedChatModel()
    cliente = build_agent("atencion-cliente", model, store=store, checkpointer=saver)
    compras = build_agent("compras", model, store=store, checkpointer=saver)
    personal = build_agent("ajustes-personal", model, store=store, checkpointer=saver)
    run_turn(cliente, ContextoCliente("C1"), "cliente-C1-1", "Prefiero que me atendáis en catalán.")
    run_turn(cliente, ContextoCliente("C1"), "cliente-C1-1", "Gracias, eso es todo.")
    run_turn(cliente, ContextoCliente("C2"), "cliente-C2-1", "¿Puedo cambiar una prenda sin ticket?")
    run_turn(cliente, ContextoCliente("C3"), "cliente-C3-1", "Hola, quería saber el estado de mi pedido.")
    run_turn(cliente, ContextoCliente("C3"), "cliente-C3-1", "Gracias, eso es todo.")
    run_turn(compras, ContextoProveedor("P1"), "compras-P1-retraso", "aviso retraso: Los vaqueros llegan tarde")
    run_turn(personal, ContextoEmpleado("E1"), "personal-E1", "ajuste turno = tarde")


def _age(db: Database, thread_id: str, days: int, *, only_older_than_newest: bool = False) -> None:
    """Move a thread's checkpoint times `days` into the past.

    The checkpointer stamps `ts` with the real time when it writes; waiting months is not an option,
    so a test rewrites that one JSON field (nothing else) of checkpoints written by the real agents.
    With `only_older_than_newest`, the newest checkpoint keeps its real time (a thread that resumed).
    """
    newest = (
        "AND checkpoint_id < (SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = %(t)s)"
        if only_older_than_newest
        else ""
    )
    n = db.execute(
        "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, '{ts}', "
        "to_jsonb(((checkpoint->>'ts')::timestamptz - make_interval(days => %(d)s))::text)) "
        f"WHERE thread_id = %(t)s {newest}",
        {"t": thread_id, "d": days},
    )
    assert n > 0


def test_retention_dry_run_lists_exactly_the_old_threads_and_the_run_deletes_only_them(db, store):
    converse(db, store)
    _age(db, "cliente-C1-1", 120)
    _age(db, "compras-P1-retraso", 45)
    _age(db, "cliente-C2-1", 20)  # younger than the retention
    _age(db, "cliente-C3-1", 200, only_older_than_newest=True)  # old history, but it resumed today
    before = thread_rows(db)
    assert set(before) == {"cliente-C1-1", "cliente-C2-1", "cliente-C3-1", "compras-P1-retraso", "personal-E1"}
    assert all(before[t].get("checkpoint_writes", 0) > 0 for t in before)

    listed = sweep.find_old_threads(db, 30)
    assert list(listed["thread_id"]) == ["cliente-C1-1", "compras-P1-retraso"]  # oldest first

    dry = sweep.run_sweep(db, trigger="manual", retention_days=30, dry_run=True)
    assert dry.status == "dry_run" and dry.threads == ["cliente-C1-1", "compras-P1-retraso"]
    assert dry.threads_deleted == 0 and thread_rows(db) == before

    real = sweep.run_sweep(db, trigger="scheduled", retention_days=30)
    assert real.status == "ok", real.error
    assert real.threads == ["cliente-C1-1", "compras-P1-retraso"] and real.threads_deleted == 2
    after = thread_rows(db)
    assert after == {t: n for t, n in before.items() if t not in {"cliente-C1-1", "compras-P1-retraso"}}

    logged = log_rows(db)
    assert [(r["status"], r["threads_found"], r["threads_deleted"], r["retention_days"]) for r in logged] == [
        ("dry_run", 2, 0, 30),
        ("ok", 2, 2, 30),
    ]
    assert logged[0]["threads_sample"] == ["cliente-C1-1", "compras-P1-retraso"]
    # The memory the conversations wrote is not retention's business.
    assert ("clientes.C1", "pref-idioma") in rows(db)


@pytest.mark.parametrize("days", [-1, 0, "-5", "abc", 2.5, True])
def test_bad_retention_days_is_a_clear_error_and_changes_nothing(db, store, days):
    put_memory(store, ("proveedores", "P1"), "aviso-retraso", {"texto": "retraso"}, valid_for_minutes=FLASH)
    wait_expired(db)
    before = rows(db)
    with pytest.raises(sweep.SweepInputError, match="retention days"):
        sweep.run_sweep(db, trigger="manual", retention_days=days)
    assert rows(db) == before and log_rows(db) == []


def test_bad_input_on_the_command_line_exits_2_and_changes_nothing(db, store, monkeypatch, capsys):
    monkeypatch.setenv("PG_AGENTES", db.dsn)
    put_memory(store, ("proveedores", "P1"), "aviso-retraso", {"texto": "retraso"}, valid_for_minutes=FLASH)
    wait_expired(db)
    before = rows(db)
    for argv in (["--retention-days", "-3"], ["--trigger", "nightly"]):
        with pytest.raises(SystemExit) as exc:
            sweep_cli.main(argv)
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "retention days must be >= 1" in err and "invalid choice: 'nightly'" in err
    monkeypatch.setenv(sweep.RETENTION_ENV, "-7")
    with pytest.raises(SystemExit):
        sweep_cli.main([])
    assert "SWEEP_RETENTION_DAYS" in capsys.readouterr().err
    with pytest.raises(sweep.SweepInputError, match="trigger"):
        sweep.run_sweep(db, trigger="nightly")
    assert rows(db) == before and log_rows(db) == []


@pytest.mark.slow  # a new Python process
def test_the_old_command_fails_and_names_the_new_one(db, store, monkeypatch):
    """`python -m core.operations.sweep` was the CronJob's command: a manifest still running it must fail
    loudly, not exit 0 having swept nothing."""
    monkeypatch.setenv("PG_AGENTES", db.dsn)
    put_memory(store, ("proveedores", "P1"), "aviso-retraso", {"texto": "retraso"}, valid_for_minutes=FLASH)
    wait_expired(db)
    before = rows(db)
    run = subprocess.run(
        [sys.executable, "-m", "core.operations.sweep"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 1 and "python -m core.operations.sweep_cli" in run.stderr
    assert rows(db) == before and log_rows(db) == []


def test_page_reads_match_sql(db, store):
    put_memory(store, ("proveedores", "P1"), "aviso-retraso", {"texto": "retraso"}, valid_for_minutes=FLASH)
    put_memory(store, ("clientes", "C1"), "pref-idioma", {"texto": "idioma: catalán"})
    put_memory(store, ("empleados", "E1"), "ajuste-turno", {"texto": "turno: tarde"})
    put_memory(store, ("proveedores", "P2"), "aviso-promocion", {"texto": "promo"})
    wait_expired(db)
    catch_up(db.dsn)  # the change follower has applied the writes (the forecast reads its core_expiry_days)
    assert sweep_reads.expired_by_root(db).set_index("root")["expired"].to_dict() == {
        "clientes": 0,
        "proveedores": 1,
        "empleados": 0,
    }

    forecast = sweep_reads.expiration_forecast(db)
    weeks = forecast["week"].drop_duplicates()
    assert 53 <= len(weeks) <= 54 and set(forecast["root"]) == {"clientes", "proveedores", "empleados"}
    totals = forecast.groupby("root")["documents"].sum().to_dict()
    assert totals == {"clientes": 1, "empleados": 1, "proveedores": 1}  # the expired one is not forecast
    by_root_week = forecast[forecast["documents"] > 0].set_index("root")["week"]
    start = weeks.min()
    # Written now: clientes expire in a year, empleados in 180 days, proveedores in 90 days. 365 days are 52 weeks and
    # a day: the 53rd week from this week's Monday when written on a Sunday.
    assert (by_root_week["clientes"] - start).days // 7 in (52, 53)
    assert (by_root_week["empleados"] - start).days // 7 in (25, 26)
    assert (by_root_week["proveedores"] - start).days // 7 in (12, 13)
    # each in the week its stored expiry falls in
    for root, prefix in (("clientes", "clientes.C1"), ("empleados", "empleados.E1"), ("proveedores", "proveedores.P2")):
        week = db.fetch_one(
            "SELECT date_trunc('week', expires_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS w FROM store "
            "WHERE prefix = %s",
            (prefix,),
        )["w"]
        assert by_root_week[root].to_pydatetime() == week, (root, week)

    sweep.run_sweep(db, trigger="manual")
    runs = sweep_reads.sweep_runs(db)
    assert len(runs) == 1 and runs.iloc[0]["documents"] == 1
    per_run = sweep_reads.deleted_per_run(db)
    assert per_run[["root", "documents"]].to_dict("records") == [{"root": "proveedores", "documents": 1}]
    sweep.run_sweep(db, trigger="manual")  # nothing left: the run is on the chart with 0, never an 'unknown' root
    assert len(sweep_reads.sweep_runs(db)) == 2
    assert sweep_reads.deleted_per_run(db)[["root", "documents"]].to_dict("records") == [
        {"root": "proveedores", "documents": 1},
        {"root": "clientes", "documents": 0},
    ]
    config = sweep_reads.ttl_configuration().set_index("root")
    assert config.loc["clientes", "ttl_days"] == 365 and config.loc["proveedores", "refresh_on_read"] == False  # noqa: E712
    assert config["in_process_sweeper_minutes"].isna().all() and config["omit_expired"].all()


def test_the_job_runs_as_the_least_privileged_role_of_the_readme(db, store):
    """deploy/sweeper-grants.sql is what docs/sre.md tells a DBA to run: the job must work with exactly that."""
    from pathlib import Path

    import psycopg

    grants = (Path(__file__).resolve().parent.parent / "deploy" / "sweeper-grants.sql").read_text()
    with psycopg.connect(db.dsn, autocommit=True) as owner:
        owner.execute(grants)
    put_memory(store, ("proveedores", "P9"), "aviso-retraso", {"texto": "retraso"}, valid_for_minutes=FLASH)
    put_memory(store, ("clientes", "C9"), "pref-idioma", {"texto": "idioma: catalán"})
    converse(db, store)
    _age(db, "personal-E1", 100)
    wait_expired(db)
    sweeper = Database(psycopg.conninfo.make_conninfo(db.dsn, user="agent_memory_sweeper"))
    assert sweeper.fetch_one("SELECT current_user AS u")["u"] == "agent_memory_sweeper"

    result = sweep.run_sweep(sweeper, trigger="scheduled", retention_days=30)

    assert result.status == "ok", result.error
    assert result.documents_deleted == 1 and result.threads_deleted == 1
    assert "personal-E1" not in thread_rows(db)
    # The grants are no wider than needed where it matters: the role cannot write memory.
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        sweeper.execute("INSERT INTO store (prefix, key, value) VALUES ('clientes.X', 'k', '{}')")


def test_kubernetes_manifests_run_the_real_entry_points():
    """The manifests cannot be applied here (no cluster): parse them and check what they run."""
    from pathlib import Path

    import yaml

    deploy = Path(__file__).resolve().parent.parent / "deploy"
    by_name = {
        (d["kind"], d["metadata"]["name"]): d
        for f in sorted(deploy.glob("*.yaml"))
        for d in yaml.safe_load_all(f.read_text())
    }
    docs = {
        kind: by_name[(kind, name)]
        for kind, name in [
            ("CronJob", "agent-memory-sweep"),
            ("Job", "agent-memory-migrate"),
            ("Deployment", "agent-memory-dashboard"),
            ("Service", "agent-memory-dashboard"),
        ]
    }

    cron = docs["CronJob"]["spec"]
    assert len(cron["schedule"].split()) == 5 and cron["concurrencyPolicy"] == "Forbid"
    container = cron["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:3] == ["python", "-m", "core.operations.sweep_cli"]
    env = {e["name"]: e for e in container["env"]}
    assert {"PG_AGENTES", sweep.RETENTION_ENV} <= set(env)
    assert sweep.validate_retention_days(env[sweep.RETENTION_ENV]["value"]) >= 1
    # The arguments parse with the job's own parser (a bad flag would exit 2).
    parser_ok = container["command"][3:]
    assert parser_ok == ["--trigger", "scheduled"] and "scheduled" in sweep.TRIGGERS

    job = docs["Job"]["spec"]["template"]["spec"]
    assert job["containers"][0]["command"] == ["python", "-m", "core.migrate"] and job["restartPolicy"] == "Never"

    dash = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert dash["command"][:4] == ["python", "-m", "streamlit", "run"] and "dashboard.py" in dash["command"]
    assert dash["readinessProbe"]["httpGet"]["path"] == "/_stcore/health"
    assert {e["name"]: e.get("value") for e in dash["env"]}["AUTO_MIGRATE"] == "0"
    assert docs["Service"]["spec"]["selector"] == docs["Deployment"]["spec"]["selector"]["matchLabels"]
