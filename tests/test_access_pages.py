"""AppTest of the Access and Access register pages, the registers' verify button and the navigation on the
real embedded PostgreSQL: counts per source equal SQL, an empty customer is said, a bad id is refused,
a manager is refused with the role named, and each role lands on its own first page."""

from __future__ import annotations

import pytest
from apptools import frame, shown
from streamlit.testing.v1 import AppTest

from core.db import Database, reset_pool
from core.privacy import access, erasure
from tests.test_access import sql_counts
from tests.test_erasure import agents_for, converse, make_store, write_docs
from ui.i18n import CATALOGUES

TIMEOUT = 60


@pytest.fixture(scope="module")
def shop(create_database):
    db = Database(create_database())
    store = make_store(db)
    agent = agents_for(db, store)
    write_docs(store, "C9", 30, nested=5)
    converse(agent, "C9", n_threads=2)
    write_docs(store, "C90", 4)
    converse(agent, "C90")
    write_docs(store, "C7", 2)
    erasure.erase(db, "C7", operator="dpo@example.com")
    yield db
    reset_pool(db.dsn)


def dashboard(page: str | None = None, **query) -> AppTest:
    at = AppTest.from_file("../dashboard.py", default_timeout=TIMEOUT)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, at.exception
    if page:
        at.switch_page(page).run()
        assert not at.exception, at.exception
    return at


def texts(at: AppTest) -> str:
    return "\n".join(
        [m.value for m in at.markdown]
        + [e.value for e in at.error]
        + [s.value for s in at.success]
        + [c.value for c in at.caption]
        + [i.value for i in at.info]
        + [w.value for w in at.warning]
        + [h.value for h in at.title]
    )


@pytest.mark.page_smoke  # the access page in the fast tier
def test_dpo_sees_counts_per_source_equal_to_sql(shop, app_env):
    app_env(shop.dsn)
    at = dashboard("app_pages/access.py")
    at.text_input(key="access.customer").input("C9").run()
    assert not at.exception, at.exception
    counts = frame(at, "Fuente", "Elementos")
    labels = {CATALOGUES["es"][f"access_count_{k}"]: k for k in access.AccessReport.COUNT_KEYS}
    by_source = {
        labels[label]: n for label, n in zip(counts.iloc[:, 0], counts.iloc[:, 1], strict=True)
    }  # every source named
    expected = sql_counts(shop, "C9")
    assert {k: by_source[k] for k in expected} == expected
    assert by_source["threads"] == 2 and by_source["documents"] > 30
    assert at.query_params["cliente"] == ["C9"] or at.query_params["cliente"] == "C9"
    assert len(at.get("download_button")) == 1
    assert "no pueden atribuirse a ningún sujeto" in texts(at)
    # nothing registered by looking: the export happens only on the download click
    assert shop.fetch_one("SELECT count(*) AS n FROM core_access_register")["n"] == 0


def test_empty_customer_and_bad_id(shop, app_env):
    app_env(shop.dsn)
    at = dashboard("app_pages/access.py")
    at.text_input(key="access.customer").input("C404").run()
    assert "No hay ningún dato sobre C404" in texts(at)
    at.text_input(key="access.customer").input("C.9").run()
    assert not at.exception, at.exception
    assert (
        "`C.9` no se puede usar: contiene «.», el separador de los espacios de nombres. No se ha consultado ni "
        "cambiado nada." in shown(texts(at))
    )
    assert len(at.get("download_button")) == 0


def test_english_labels(shop, app_env):
    app_env(shop.dsn)
    at = dashboard("app_pages/access.py", lang="en")
    at.text_input(key="access.customer").input("C9").run()
    assert "Right of access" in texts(at)
    assert set(frame(at, "Source", "Items").iloc[:, 0]) >= {"Memory documents", "Messages", "Conversations"}


@pytest.mark.parametrize(
    ("lang", "label"), [("es", "Exportar y descargar: JSON, Español"), ("en", "Export and download: JSON, English")]
)
def test_the_export_button_names_the_file_it_makes(shop, app_env, lang, label):
    """Issue 54: a click on the export button right after changing the format reached the previous run's button and
    downloaded the previous format. The button names the format and the document's language of its file, so what
    it downloads is what it says at the moment of the click."""
    app_env(shop.dsn)
    at = dashboard("app_pages/access.py", lang=lang)
    at.text_input(key="access.customer").input("C9").run()
    assert [b.proto.label for b in at.get("download_button")] == [label]
    if lang == "es":  # (AppTest maps a radio's value through its format_func in the test's thread, in Spanish)
        at.radio(key="access.format").set_value("html")
        at.selectbox(key="access.lang").set_value("en").run()
        assert not at.exception, at.exception
        assert [b.proto.label for b in at.get("download_button")] == ["Exportar y descargar: HTML, English"]


def test_a_manager_is_refused_with_the_role_named(shop, app_env):
    app_env(shop.dsn, LOCAL_ROLES="manager")
    for page in ("app_pages/access.py", "app_pages/access_register.py", "app_pages/erasure.py"):
        at = dashboard(page)
        assert "Esta página requiere el rol «dpo»." in [e.value for e in at.error], page
        assert len(at.text_input) == 0 and len(at.get("download_button")) == 0


@pytest.mark.parametrize(
    "local_roles, landing",
    [
        ("manager,sre,dpo", "Memoria entre conversaciones"),
        ("dpo", "Borrar todo lo que los agentes recuerdan de un cliente"),
        ("sre", None),
    ],
)
def test_each_role_lands_on_its_first_page(shop, app_env, local_roles, landing):
    app_env(shop.dsn, LOCAL_ROLES=local_roles)
    at = dashboard()
    assert not at.error, [e.value for e in at.error]
    if landing:
        assert landing in [t.value for t in at.title]
    else:  # the SRE's first page is Sweeps
        assert any("Barridos" in t.value or "barrido" in t.value.lower() for t in at.title), [t.value for t in at.title]


@pytest.mark.page_smoke  # the registers' pages in the fast tier
def test_register_pages_verify_and_name_an_edited_row(shop, app_env):
    app_env(shop.dsn)
    access.export(shop, "C9", fmt="json", lang="es", operator="dpo@example.com")
    at = dashboard("app_pages/access_register.py")
    assert frame(at, "customer_id", "sha256")["customer_id"].tolist()[0] == "C9"
    at.button(key="access_register.verify").click().run()
    assert any("Cadena íntegra: 1 filas selladas" in s.value for s in at.success), texts(at)

    at = dashboard("app_pages/erasure_register.py")
    at.button(key="erasure_register.verify").click().run()
    assert any("Cadena íntegra" in s.value for s in at.success), texts(at)
    rid = shop.fetch_one("SELECT id FROM core_erasure_register WHERE customer_id = 'C7'")["id"]
    shop.execute("UPDATE core_erasure_register SET counts_after = '{}' WHERE id = %s", (rid,))
    at.button(key="erasure_register.verify").click().run()
    assert any(
        f"Cadena ROTA en core_erasure_register #{rid}: editada después de sellarse" in e.value for e in at.error
    ), texts(at)
