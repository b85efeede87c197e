"""A production deployment without TERM_HASH_KEY is refused at start (issue 54 #9), as docs/operator.md says: the
dashboard Deployment's start-up probe fails with one line naming the setting (so no replica becomes ready), the
sweep job exits before it reads or deletes anything, and the dashboard serves no page (Spanish and English).
Before, it started, served every page, and failed in the middle of the DPO's erasure and after the sweep's pruning.
The embedded demo still needs no configuration. Real processes, the real manifest, a real database."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import DIMS, ROOT
from streamlit.testing.v1 import AppTest

from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store, put_memory

FLASH = 0.005  # minutes: the shortest validity a document can be given through the API


def dashboard_container() -> dict:
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "dashboard-deployment.yaml").read_text()))
    (deployment,) = [d for d in docs if d and d.get("kind") == "Deployment"]
    return deployment["spec"]["template"]["spec"]["containers"][0]


def environment(tmp_path: Path, **env: str) -> dict[str, str]:
    """This process's environment without any of the dashboard's settings, plus `env`."""
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PG_AGENTES", "TERM_HASH_KEY", "AGENT_MEMORY_DATA", "PG_AGENTES_REPLICA", "PG_DASHBOARD")
    }
    return base | {"AGENT_MEMORY_DATA": str(tmp_path / "data"), "PYTHONPATH": str(ROOT)} | env


def test_the_start_up_probe_refuses_production_without_the_key_in_one_line(db, tmp_path):
    container = dashboard_container()
    probe = container["startupProbe"]["exec"]["command"]
    # the probe must hold the replica out of service, not the readiness probe's HTTP check alone
    assert container["readinessProbe"]["httpGet"]["path"] == "/_stcore/health"

    def run(**env: str) -> subprocess.CompletedProcess:
        return subprocess.run(probe, cwd=ROOT, env=environment(tmp_path, **env), capture_output=True, text=True)

    missing = run(PG_AGENTES=db.dsn)
    assert missing.returncode != 0, missing
    (line,) = missing.stderr.strip().splitlines()  # one clear line, naming the setting
    assert line.startswith("TERM_HASH_KEY is not set") and "PG_AGENTES" in line, line
    malformed = run(PG_AGENTES=db.dsn, TERM_HASH_KEY="not hex")
    assert malformed.returncode != 0 and "TERM_HASH_KEY must be" in malformed.stderr, malformed
    assert run(PG_AGENTES=db.dsn, TERM_HASH_KEY="ab" * 32).returncode == 0
    # the dashboard's own database apart (issue 52) is a setting like any other for the probe (the schema check of
    # both databases is the dashboard's start's: test_the_dashboard_starts_with_its_database_apart)
    assert run(PG_AGENTES=db.dsn, TERM_HASH_KEY="ab" * 32, PG_DASHBOARD=db.dsn + "_dashboard").returncode == 0
    # the embedded demo (no PG_AGENTES) needs no configuration at all, and the probe writes nothing
    embedded = run()
    assert embedded.returncode == 0 and not embedded.stderr.strip(), embedded
    assert not (tmp_path / "data").exists()


def test_the_sweep_job_refuses_before_it_touches_anything(db, tmp_path):
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    put_memory(store, ("proveedores", "P1"), "aviso-retraso", {"texto": "retraso"}, valid_for_minutes=FLASH)
    time.sleep(0.4)  # expired: a sweep would delete it
    documents = db.fetch("SELECT prefix, key FROM store ORDER BY 1, 2")
    assert documents == [{"prefix": "proveedores.P1", "key": "aviso-retraso"}]
    job = subprocess.run(
        [sys.executable, "-m", "core.operations.sweep_cli", "--trigger", "scheduled"],
        cwd=ROOT,
        env=environment(tmp_path, PG_AGENTES=db.dsn),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert job.returncode == 2, (job.returncode, job.stderr[-2000:])
    (line,) = job.stderr.strip().splitlines()
    assert line.startswith("TERM_HASH_KEY is not set"), line
    assert db.fetch("SELECT * FROM core_sweep_log") == []  # no run logged: nothing was started
    assert db.fetch("SELECT prefix, key FROM store ORDER BY 1, 2") == documents  # nothing deleted


@pytest.mark.parametrize(
    ("language", "title", "said"),
    [
        (
            "es",
            "Arranque rechazado: falta configuración",
            "El panel no arranca en producción sin un valor válido de `TERM_HASH_KEY`",
        ),
        (
            "en",
            "Start-up refused: a setting is missing",
            "The dashboard does not start in production without a valid `TERM_HASH_KEY`",
        ),
    ],
)
def test_the_dashboard_serves_no_page_without_the_key(db, app_env, monkeypatch, language, title, said):
    app_env(db.dsn, LOCAL_ROLES="manager,sre,dpo")
    monkeypatch.delenv("TERM_HASH_KEY")
    at = AppTest.from_file("../dashboard.py", default_timeout=60)
    at.query_params["lang"] = language
    at.run()
    assert not at.exception
    assert [t.value for t in at.title] == [title]
    (error,) = [e.value for e in at.error]
    assert error.startswith(said) and "TERM_HASH_KEY" in error and "docs/operator.md" in error, error
    for page in ("app_pages/erasure.py", "app_pages/access.py", "app_pages/sweeps.py"):
        at.switch_page(page).run()
        assert not at.exception
        assert [t.value for t in at.title] == [title], page
        assert not at.text_input and not at.button and not at.dataframe, page  # nothing of the page is served
    monkeypatch.setenv("TERM_HASH_KEY", "cd" * 32)
    at.switch_page("app_pages/sweeps.py").run()
    assert not at.exception and not at.error and title not in [t.value for t in at.title]


def test_the_dashboard_starts_with_its_database_apart(split_db, app_env):
    """PG_DASHBOARD set (issue 52): every table of ours lives in the dashboard's database, so the dashboard starts on it
    and its pages read there (before, it refused to start: the pages still read the agents' copies)."""
    app_env(split_db.dsn, LOCAL_ROLES="manager,sre,dpo", PG_DASHBOARD=split_db.ours.dsn)
    at = AppTest.from_file("../dashboard.py", default_timeout=60).run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    for page in ("app_pages/memory.py", "app_pages/sweeps.py", "app_pages/erasure.py"):
        at.switch_page(page).run()
        assert not at.exception and not at.error, (page, at.exception, [e.value for e in at.error])
