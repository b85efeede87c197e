"""Issue 52, cluster E: the Erasure and Erasure register pages (AppTest) on an agents' database whose dashboard database
is apart. PG_DASHBOARD itself is still refused by the dashboard until every cluster has moved, so the split is
registered in this process (`split_db`: core.db.use_dashboard_database), where the pages' code finds it."""

from __future__ import annotations

import psycopg
from streamlit.testing.v1 import AppTest

from core.privacy import erasure
from tests.test_erasure_split import CUSTOMER, agents_rows, ours_count, retail_turns, written_there

TIMEOUT = 60


def texts(at: AppTest) -> str:
    return "\n".join(
        [m.value for m in at.markdown] + [e.value for e in at.error] + [s.value for s in at.success]
        + [c.value for c in at.caption] + [i.value for i in at.info]
    )  # fmt: skip


def test_the_erasure_and_register_pages_erase_and_recheck_in_our_database_apart(split_db, app_env):
    """The DPO previews, confirms and erases on the Erasure page: the request is a row of ours; the register page
    lists it from ours and its re-check is written there; the agents' copies of the cluster's tables stay untouched."""
    retail_turns(split_db.dsn)
    app_env(split_db.dsn, LOCAL_ROLES="dpo")
    at = AppTest.from_file("../dashboard.py", default_timeout=TIMEOUT).run()
    at.switch_page("app_pages/erasure.py").run()
    assert not at.exception, at.exception
    at.text_input(key="erasure.customer").input(CUSTOMER).run()
    at.button(key="erasure.preview").click().run()
    at.button(key="erasure.start").click().run()
    at.text_input(key="erasure.confirm_id").input(CUSTOMER).run()
    at.button(key="erasure.confirm").click().run()
    assert not at.exception, at.exception
    assert "Borrado completo" in texts(at)
    assert agents_rows(split_db.dsn, CUSTOMER)["store"] == 0
    assert ours_count(split_db, "SELECT count(*) FROM core_erasure_register WHERE status = 'complete'") == 1

    at.switch_page("app_pages/erasure_register.py").run()
    assert not at.exception, at.exception
    assert at.dataframe[0].value["customer_id"].tolist() == [f"/erasure?cliente={CUSTOMER}&lang=es"]
    at.button(key="erasure_register.recheck_all").click().run()
    assert not at.exception, at.exception
    assert "1 solicitud re-comprobada, 0 con datos reaparecidos." in texts(at)
    assert ours_count(split_db, "SELECT count(*) FROM core_erasure_rechecks WHERE trigger = 'manual'") == 1
    assert erasure.stuck_requests(split_db) == []
    assert written_there(split_db.dsn) == {}
    with psycopg.connect(split_db.dsn) as conn:  # the agents' copy of the register: empty
        assert conn.execute("SELECT count(*) FROM core_erasure_register").fetchone()[0] == 0


def test_the_access_pages_log_views_and_exports_in_our_database_apart(split_db, app_env):
    """Memory and Access log their views in ours; the access export's register row is written there; the access
    register page lists both from ours and verifies the two chains there."""
    from apptools import frame

    from core.privacy import access, data_views
    from tests.test_access_pages import dashboard

    retail_turns(split_db.dsn)
    app_env(split_db.dsn)
    dashboard("app_pages/memory.py", ns=f"clientes.{CUSTOMER}")
    dashboard("app_pages/access.py", cliente=CUSTOMER)
    assert data_views.flush(split_db)
    assert ours_count(split_db, "SELECT count(*) FROM core_data_views WHERE customer_id = %s", (CUSTOMER,)) == 2
    export = access.export(split_db, CUSTOMER, fmt="json", lang="es", operator="dpo@example.com")
    assert ours_count(split_db, "SELECT count(*) FROM core_access_register") == 1
    at = dashboard("app_pages/access_register.py")
    assert sorted(frame(at, "viewer", "target")["target"]) == [f"art15:{CUSTOMER}", f"clientes.{CUSTOMER}"]
    at.button(key="access_register.verify_views").click().run()
    assert any("Cadena íntegra: 2 filas selladas" in s.value for s in at.success), texts(at)
    assert export.register_id in frame(at, "operator", "sha256")["id"].tolist()
    assert written_there(split_db.dsn) == {}
