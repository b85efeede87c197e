"""The erasure register names what re-checked a request as the sweep log does (issue 54 #4): a re-check made by a
manual sweep ("Barrer ahora") or by a dry run is not a "periodic sweep". Real erasure, real sweeps (scheduled,
manual, manual dry run) and the register's button, read on the Erasure register page in Spanish and English."""

from __future__ import annotations

import pytest
from apptools import frame
from streamlit.testing.v1 import AppTest

from core.db import Database, reset_pool
from core.operations.sweep import run_sweep
from core.privacy import erasure, erasure_register
from tests.test_erasure import make_store, write_docs


@pytest.fixture(scope="module")
def checked(create_database):
    db = Database(create_database())
    write_docs(make_store(db), "C9", 5)
    request = erasure.erase(db, "C9", operator="dpo@example.com").request_id
    assert run_sweep(db, trigger="scheduled").status == "ok"
    assert run_sweep(db, trigger="manual", dry_run=True).status == "dry_run"
    assert run_sweep(db, trigger="manual").status == "ok"
    erasure_register.recheck_all(db, trigger="manual", operator="dpo@example.com")  # the register's button
    db.request = request
    yield db
    reset_pool(db.dsn)


@pytest.mark.parametrize(
    ("language", "expected"),
    [
        ("es", ["a mano (botón)", "barrido a mano", "simulación de barrido a mano", "barrido periódico"]),
        ("en", ["by hand (button)", "manual sweep", "manual sweep dry run", "periodic sweep"]),
    ],
)
def test_the_register_names_each_recheck_as_the_sweep_log_does(checked, app_env, language, expected):
    app_env(checked.dsn, LOCAL_ROLES="dpo")
    at = AppTest.from_file("../dashboard.py", default_timeout=60)
    at.query_params["lang"] = language
    at.run()
    assert not at.exception
    at.switch_page("app_pages/erasure_register.py").run()
    assert not at.exception
    assert at.selectbox(key="erasure_register.request").value == checked.request
    checks = frame(at, "checked_at", "trigger", "clean")  # newest first
    assert list(checks["trigger"]) == expected


def test_the_access_export_names_every_sweep_trigger_in_both_languages():
    """The art. 15 export shows the erasure re-checks of the customer with their trigger in words, from its own
    table of words: every trigger a sweep records is there, in both languages."""
    from core.operations.sweep import RECHECK_TRIGGERS
    from core.privacy.access_render import LABELS

    assert LABELS["es"]["sweep_manual_dry_run"] == "simulación de barrido a mano"
    assert LABELS["en"]["sweep_manual"] == "manual sweep"
    for language in ("es", "en"):
        assert set(RECHECK_TRIGGERS) <= set(LABELS[language]), language
