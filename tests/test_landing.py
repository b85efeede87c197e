"""Landing states: on a database where nothing has happened yet (e.g. a production database on
which no agent has talked and no sweep has run), every page says what to do, in both languages."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

GUIDANCE = {
    "app_pages/memory.py": ("Conecte los agentes a esta base de datos", "Point the agents at this database"),
    "app_pages/preferences.py": ("elija un periodo más largo", "pick a longer period"),
    "app_pages/sweeps.py": (
        "programe el CronJob (deploy/sweep-cronjob.yaml)",
        "schedule the CronJob (deploy/sweep-cronjob.yaml)",
    ),
    "app_pages/checkpoints.py": (
        "Aún no hay checkpoints: aparecen en cuanto un agente",
        "No checkpoints yet: they appear as soon as an agent",
    ),
    "app_pages/degradation.py": ("compruebe que las réplicas lo usan", "check that the replicas use it"),
    "app_pages/erasure_register.py": (
        "Tramite la primera en la página Borrado",
        "Make the first one on the Erasure page",
    ),
}


@pytest.mark.page_smoke  # every page but access, access_register and erasure, in the fast tier
@pytest.mark.parametrize("lang", ["es", "en"])
def test_every_page_on_an_empty_database_says_what_to_do(db, app_env, lang):
    app_env(db.dsn)
    missing = []
    for page, (es, en) in GUIDANCE.items():
        at = AppTest.from_file("../dashboard.py", default_timeout=60)
        at.query_params["lang"] = lang
        at.run()
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception)
        expected = es if lang == "es" else en
        shown = [i.value for i in at.info]
        if not any(expected in text for text in shown):
            missing.append(f"{page}: {expected!r} not in {shown}")
    assert not missing, "\n".join(missing)
