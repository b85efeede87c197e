"""History pruning as a step of the sweep job: the command line and the CronJob's environment, run as the least
privileged role of deploy/sweeper-grants.sql, logged in core_sweep_log and core_prune_threads; bad input exits 2
and changes nothing. Real agents on the real embedded PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
import yaml
from test_sweep import DIMS, converse

from core.db import Database
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store
from core.operations import sweep_cli
from core.storage import prune

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
COUNTS = (
    "SELECT (SELECT count(*) FROM checkpoints) AS c, (SELECT count(*) FROM checkpoint_writes) AS w, "
    "(SELECT count(*) FROM checkpoint_blobs) AS b"
)


@pytest.fixture
def sweeper(db, monkeypatch):
    """The agents' conversations written, and the job's environment pointing at `db` as agent_memory_sweeper."""
    converse(db, build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS))
    with psycopg.connect(db.dsn, autocommit=True) as owner:
        owner.execute((DEPLOY / "sweeper-grants.sql").read_text())
    monkeypatch.setenv("PG_AGENTES", psycopg.conninfo.make_conninfo(db.dsn, user="agent_memory_sweeper"))
    monkeypatch.setenv("EMBEDDINGS_DIMS", str(DIMS))
    for name in prune.POLICY_ENV.values():
        monkeypatch.delenv(name, raising=False)
    return db


def test_dry_run_then_the_cronjob_environment_prunes_as_the_least_privileged_role(sweeper, monkeypatch, capsys):
    db = sweeper
    before = db.fetch_one(COUNTS)
    assert sweep_cli.main(["--keep-latest", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert db.fetch_one(COUNTS) == before
    dry = db.fetch_one("SELECT * FROM core_sweep_log ORDER BY id DESC LIMIT 1")
    assert dry["status"] == "dry_run" and dry["prune_policy"] == {"keep_latest": 2}
    listed = db.fetch("SELECT * FROM core_prune_threads WHERE run_id = %s ORDER BY thread_id", (dry["id"],))
    assert {r["thread_id"] for r in listed} == {
        "cliente-C1-1",
        "cliente-C2-1",
        "cliente-C3-1",
        "compras-P1-retraso",
        "personal-E1",
    }
    assert all(f"pruned thread: {r['thread_id']} ({r['checkpoints']} checkpoints" in out for r in listed)
    assert dry["prune_checkpoints"] == sum(r["checkpoints"] for r in listed) > 0
    assert dry["prune_bytes"] == sum(r["bytes"] for r in listed) > 0

    monkeypatch.setenv("SWEEP_KEEP_LATEST", "2")  # as deploy/sweep-cronjob.yaml sets it
    assert sweep_cli.main(["--trigger", "scheduled"]) == 0
    run = db.fetch_one("SELECT * FROM core_sweep_log ORDER BY id DESC LIMIT 1")
    assert run["status"] == "ok", run["error"]
    assert [run[k] for k in ("prune_threads", "prune_checkpoints", "prune_writes", "prune_blobs", "prune_bytes")] == [
        dry[k] for k in ("prune_threads", "prune_checkpoints", "prune_writes", "prune_blobs", "prune_bytes")
    ]
    after = db.fetch_one(COUNTS)
    assert after == {
        "c": before["c"] - run["prune_checkpoints"],
        "w": before["w"] - run["prune_writes"],
        "b": before["b"] - run["prune_blobs"],
    }
    assert (
        db.fetch_one(
            "SELECT max(n) AS n FROM (SELECT count(*) AS n FROM checkpoints GROUP BY thread_id, checkpoint_ns) x"
        )["n"]
        == 2
    )


@pytest.mark.parametrize(
    "argv, env, message",
    [
        (["--keep-latest", "0"], {}, ">= 1"),
        ([], {"SWEEP_KEEP_LATEST": "muchos"}, "SWEEP_KEEP_LATEST='muchos'"),
        (["--idle-minutes", "5"], {}, "needs --keep-latest"),
        (["--keep-latest", "3", "--prune-root", "clients"], {}, "one of"),
    ],
)
def test_bad_prune_input_exits_2_and_changes_nothing(sweeper, monkeypatch, capsys, argv, env, message):
    db = sweeper
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    before = db.fetch_one(COUNTS)
    with pytest.raises(SystemExit) as exit_:
        sweep_cli.main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert db.fetch_one(COUNTS) == before
    assert db.fetch("SELECT * FROM core_sweep_log") == []


def test_the_cronjob_sets_a_valid_prune_policy():
    docs = [d for d in yaml.safe_load_all((DEPLOY / "sweep-cronjob.yaml").read_text()) if d["kind"] == "CronJob"]
    env = {
        e["name"]: e.get("value")
        for e in docs[0]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    policy = prune.validate_policy(env[prune.POLICY_ENV["keep_latest"]], env.get(prune.POLICY_ENV["idle_minutes"]))
    assert policy.keep_latest >= 1 and policy.idle_minutes is not None


def test_an_erasure_removes_the_customers_threads_and_keys_from_what_runs_listed(sweeper):
    """core_prune_threads and core_sweep_documents name threads and prefixes: a real erasure of C1 deletes C1's rows
    there (found by column) and leaves the others."""
    from core.memory.store import put_memory
    from core.privacy import erasure

    db = sweeper
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    put_memory(store, ("clientes", "C1"), "pref-idioma", {"texto": "idioma: catalán"}, valid_for_minutes=0.005)
    put_memory(store, ("clientes", "C2"), "pref-idioma", {"texto": "idioma: euskera"}, valid_for_minutes=0.005)
    import time

    time.sleep(0.4)
    assert sweep_cli.main(["--keep-latest", "1", "--dry-run"]) == 0
    assert {r["prefix"] for r in db.fetch("SELECT prefix FROM core_sweep_documents")} == {"clientes.C1", "clientes.C2"}
    assert "cliente-C1-1" in {r["thread_id"] for r in db.fetch("SELECT thread_id FROM core_prune_threads")}

    result = erasure.erase(Database(db.dsn), "C1", operator="dpo@example.com")
    assert result.status == "complete", result
    assert {r["prefix"] for r in db.fetch("SELECT prefix FROM core_sweep_documents")} == {"clientes.C2"}
    left = {r["thread_id"] for r in db.fetch("SELECT thread_id FROM core_prune_threads")}
    assert "cliente-C1-1" not in left and "cliente-C2-1" in left
