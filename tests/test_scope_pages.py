"""Store managers' pages scoped to their stores (issue 39), AppTest with a signed-in user (`AppTest.user`, `[auth]` in
the secrets): totals labelled and equal to SQL over their stores' customers, another store's customer refused by URL
and the refusal logged, a manager without a store or with an unusable claim told why and shown nothing, the mapping's
failing source named, the SRE and DPO pages saying they are not limited to a store."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from apptools import as_int, metric
from conftest import settings_for
from streamlit.testing.v1 import AppTest

from core.memory import customer_stores
from core.privacy import data_views

AUTH = {
    "redirect_uri": "http://localhost:8501/oauth2callback",
    "cookie_secret": "a-long-random-test-cookie-secret-0123456789",
    "client_id": "agent-memory-dashboard",
    "client_secret": "test-client-secret",
    "server_metadata_url": "http://127.0.0.1:9/.well-known/openid-configuration",
}
MANAGER = "gerente.t001@example.com"


@pytest.fixture(scope="module")
def mapped(demo_db):
    assert not customer_stores.refresh(demo_db, settings_for(demo_db.dsn)).errors
    return demo_db


def signed_in(page: str | None, email: str = MANAGER, roles=("manager",), **claims) -> AppTest:
    at = AppTest.from_file("../dashboard.py", default_timeout=60)
    at.secrets["auth"] = AUTH
    at.secrets["roles"] = {email: list(roles)}
    at.user = {"is_logged_in": True, "email": email, "email_verified": True, "name": email, **claims}
    if page:
        at.run()
        at.switch_page(page)
    at.run()
    assert not at.exception, at.exception
    return at


def texts(at: AppTest) -> str:
    """The page's messages as read (ui.safe.md's escapes removed)."""
    shown = "\n".join(e.value for kind in ("error", "warning", "info", "caption", "markdown") for e in at.get(kind))
    return shown.replace("\\", "")


def sql_totals(db, store: str) -> dict:
    return db.fetch_one(
        "SELECT count(*) AS documents, count(DISTINCT prefix) AS holders FROM store WHERE prefix IN "
        "(SELECT 'clientes.' || cliente_id FROM core_customer_stores WHERE effective AND tienda = %s)",
        (store,),
    )


def test_a_manager_sees_their_stores_totals_and_another_stores_customer_is_refused_and_logged(mapped, app_env):
    db = mapped
    app_env(db.dsn)
    at = signed_in(None, stores=["T001"])
    sql = sql_totals(db, "T001")
    assert as_int(metric(at, "Documentos guardados (sus tiendas)")) == sql["documents"] > 0
    assert as_int(metric(at, "Titulares con memoria (sus tiendas)")) == sql["holders"]
    shown = texts(at)
    assert "Clientes de sus tiendas: T001" in shown and "reclamación «stores»" in shown
    assert "clientes sin tienda" in shown
    other = db.fetch_one(
        "SELECT cliente_id FROM core_customer_stores WHERE effective AND tienda = 'T002' AND cliente_id NOT IN "
        "(SELECT cliente_id FROM core_customer_stores WHERE effective AND tienda = 'T001') "
        "AND 'clientes.' || cliente_id IN (SELECT prefix FROM store) ORDER BY 1 LIMIT 1"
    )["cliente_id"]
    # the shared demo database holds what other modules' pages logged for the same manager: this test's rows only
    assert data_views.flush(db)
    before = db.fetch_one("SELECT coalesce(max(id), 0) AS id FROM core_data_views")["id"]
    at = AppTest.from_file("../dashboard.py", default_timeout=60)
    at.secrets["auth"], at.secrets["roles"] = AUTH, {MANAGER: ["manager"]}
    at.user = {"is_logged_in": True, "email": MANAGER, "email_verified": True, "stores": ["T001"]}
    at.query_params["ns"] = f"clientes.{other}"
    at.run()
    assert not at.exception
    assert any(f"clientes.{other}" in e.value and "no es un cliente de sus tiendas" in e.value for e in at.error)
    assert not any("valor" in d.value.columns for d in at.dataframe)  # the customer's documents are not shown
    assert data_views.flush(db)
    logged = db.fetch(
        "SELECT viewer, role, customer_id, target FROM core_data_views "
        "WHERE kind = 'refused' AND viewer = %s AND id > %s",
        (MANAGER, before),
    )
    assert logged == [{"viewer": MANAGER, "role": "manager", "customer_id": other, "target": f"clientes.{other}"}]


def test_preferences_totals_are_the_stores_and_equal_sql(mapped, app_env):
    db = mapped
    app_env(db.dsn)
    at = signed_in("app_pages/preferences.py", stores=["T002"])
    until = date.today()
    conversations = db.fetch_one(
        "SELECT count(DISTINCT thread_id) AS n FROM core_thread_days WHERE day BETWEEN %s AND %s AND cliente_id IN "
        "(SELECT cliente_id FROM core_customer_stores WHERE effective AND tienda = 'T002')",
        (until - timedelta(days=29), until),
    )["n"]
    assert as_int(metric(at, "Conversaciones (sus tiendas)")) == conversations > 0


@pytest.mark.parametrize(
    "claims, expected",
    [
        ({}, "tiene el rol de responsable de tienda pero ninguna tienda"),
        ({"stores": []}, "tiene el rol de responsable de tienda pero ninguna tienda"),
        ({"stores": "T001"}, "must be a list of store ids, got str"),
        ({"stores": ["T%"]}, "store id 'T%' holds '%'"),
    ],
)
def test_a_manager_without_a_usable_store_sees_nothing_and_is_told_why(mapped, app_env, claims, expected):
    app_env(mapped.dsn)
    at = signed_in(None, **claims)
    assert expected in texts(at)
    assert not at.metric and not at.dataframe and not at.get("plotly_chart")


def test_a_failing_source_is_named_and_nothing_is_shown(db, app_env):
    query = "SELECT cliente_id, tienda FROM no_such_table"
    customer_stores.refresh(db, settings_for(db.dsn, customer_store_query=query))
    app_env(db.dsn, CUSTOMER_STORE_QUERY=query)
    at = signed_in(None, stores=["T001"])
    shown = texts(at)
    assert "No se pudo leer la fuente «la consulta configurada" in shown and "UndefinedTable" in shown
    assert not at.metric and not at.dataframe


def test_sre_and_dpo_pages_say_they_are_not_limited_to_a_store(mapped, app_env):
    app_env(mapped.dsn)
    at = signed_in("app_pages/sweeps.py", email="sre@example.com", roles=("sre", "dpo"))
    assert "Sin límite de tienda: esta página muestra todas las tiendas (rol operaciones (sre))." in texts(at)
    at.switch_page("app_pages/erasure_register.py").run()
    assert "Sin límite de tienda: esta página muestra todas las tiendas (rol protección de datos (dpo))." in texts(at)
