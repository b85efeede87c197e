"""What every session of the process shares (issue 29, many users at once) and what it must not: a prepared table is
shared only between viewers of the same roles, time zone and language; a chart only within its language; the page
reads' cache is bounded."""

from __future__ import annotations

import json

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from core.capture.follower import catch_up
from ui import common

APP = "../dashboard.py"


def _customer_table(page_role: str) -> None:
    import pandas as pd

    from ui.common import require_role
    from ui.tables import table

    require_role(page_role)  # a page of this role
    table(pd.DataFrame({"customer_id": ["C1"], "thread_id": ["cliente-C1-1"], "turns": [1234]}), key="t")


def _shown(monkeypatch, roles: str, lang: str = "es", page: str | None = None):
    """The one table as a local user with `roles` sees it on a page of role `page` (default: the user's first), in a
    new session; only the settings (where the roles are read from) are forgotten between sessions, the process's data
    caches are kept, as in a running dashboard."""
    monkeypatch.setenv("LOCAL_ROLES", roles)
    common.settings.clear()
    at = AppTest.from_function(_customer_table, args=(page or roles.split(",")[0],), default_timeout=30)
    at.query_params["lang"] = lang
    at.session_state["lang"] = lang
    at.run()
    assert not at.exception
    df = at.dataframe[0]
    return df.value.iloc[0].to_dict(), json.loads(df.proto.columns)


def test_a_prepared_table_is_never_shared_across_roles_nor_languages(monkeypatch):
    monkeypatch.delenv("PG_AGENTES", raising=False)
    st.cache_data.clear()
    try:
        dpo, _ = _shown(monkeypatch, "dpo")
        assert dpo["customer_id"] == "/erasure?cliente=C1&lang=es"  # the DPO's link: erase this customer
        # the same frame, now prepared in the process's cache: a manager's page leads to the customer's memory
        manager, config = _shown(monkeypatch, "manager")
        assert manager["customer_id"] == "/memory?ns=clientes.C1&lang=es" and manager["thread_id"] == "cliente-C1-1"
        assert config["customer_id"]["label"] == "Cliente"
        assert config["customer_id"]["type_config"]["display_text"] == r"ns=clientes\.([^&]*)"
        sre, _ = _shown(monkeypatch, "sre")
        assert sre["customer_id"] == "/checkpoints?cliente=C1&lang=es"
        assert sre["thread_id"] == "/checkpoints?thread=cliente-C1-1&lang=es"
        # and the DPO again (from the cache now) still gets the DPO's links, never the SRE's
        assert _shown(monkeypatch, "dpo")[0]["customer_id"] == "/erasure?cliente=C1&lang=es"
        english, config = _shown(monkeypatch, "dpo", "en")
        assert english["customer_id"] == "/erasure?cliente=C1&lang=en" and config["customer_id"]["label"] == "Customer"
    finally:
        common.settings.clear()
        st.cache_data.clear()


def test_a_customer_link_leads_where_its_reader_came_from(monkeypatch):
    """One person with every role (local mode): on a manager's page a customer leads to their memory, on an SRE's to
    their threads; only the DPO's pages lead to an erasure (issue 40)."""
    monkeypatch.delenv("PG_AGENTES", raising=False)
    st.cache_data.clear()
    try:
        everyone = "manager,sre,dpo"
        assert _shown(monkeypatch, everyone, page="manager")[0]["customer_id"] == "/memory?ns=clientes.C1&lang=es"
        assert _shown(monkeypatch, everyone, page="sre")[0]["customer_id"] == "/checkpoints?cliente=C1&lang=es"
        assert _shown(monkeypatch, everyone, page="dpo")[0]["customer_id"] == "/erasure?cliente=C1&lang=es"
    finally:
        common.settings.clear()
        st.cache_data.clear()


def test_a_shared_chart_is_never_shown_in_another_language(db, app_env):
    db.execute(
        "INSERT INTO store (prefix, key, value) VALUES ('clientes.C1', 'pref-recogida', "
        '\'{"tipo": "recogida", "valor": "T001"}\'::jsonb)'
    )
    catch_up(db.dsn)  # the change follower's per-root counts (the chart's) include it
    app_env(db.dsn, LOCAL_ROLES="manager")
    charts = {}
    for lang in ("es", "en", "es"):
        at = AppTest.from_file(APP, default_timeout=60)
        at.query_params["lang"] = lang
        at.run()
        at.switch_page("app_pages/memory.py").run()
        assert not at.exception
        by_root = json.loads(next(c for c in at.get("plotly_chart") if c.key == "memory.by_root_chart").proto.spec)
        charts.setdefault(lang, []).append(by_root)
    es, en = charts["es"][0], charts["en"][0]
    assert es["layout"]["yaxis"]["title"]["text"] == "Documentos guardados" and es["data"][0]["x"] == ["Clientes"]
    assert en["layout"]["yaxis"]["title"]["text"] == "Saved documents" and en["data"][0]["x"] == ["Customers"]
    assert es["layout"]["separators"] != en["layout"]["separators"]
    assert charts["es"][1] == es  # the second Spanish session: the same chart


def test_a_chart_builder_must_take_its_language():
    def figure(frame):
        return None

    with pytest.raises(TypeError, match="language"):
        common.shared_figure(figure)
