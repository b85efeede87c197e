"""The local-mode banner names the roles actually granted (LOCAL_ROLES), in the UI language."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest


@pytest.mark.parametrize(
    "local_roles, lang, expected",
    [
        ("dpo", "es", "Roles concedidos: protección de datos (dpo)."),
        ("manager,sre", "es", "Roles concedidos: responsable de tienda (manager), operaciones (sre)."),
        ("manager,sre,dpo", "en", "Roles granted: store manager (manager), operations (sre), data protection (dpo)."),
    ],
)
def test_banner_names_the_granted_roles(db, app_env, local_roles, lang, expected):
    app_env(db.dsn, LOCAL_ROLES=local_roles)
    at = AppTest.from_file("../dashboard.py", default_timeout=30)
    at.query_params["lang"] = lang
    at.run()
    assert not at.exception, at.exception
    banners = [w.value for w in at.sidebar.warning]
    assert len(banners) == 1 and banners[0].endswith(expected), banners
    if local_roles == "dpo":
        assert "todos los roles" not in banners[0] and "manager" not in banners[0] and "sre" not in banners[0]
