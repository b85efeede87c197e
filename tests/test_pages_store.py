"""AppTest of the store managers' pages on the demo database: no exception, and every
figure equal to a SQL count on the same database."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from apptools import as_int, frame, metric, plain
from streamlit.testing.v1 import AppTest

from core.memory.store import MAX_DOCS_PER_CUSTOMER
from ui.safe import md_code

APP = "../dashboard.py"


@pytest.fixture
def at(demo_db, app_env):
    app_env(demo_db.dsn)
    app = AppTest.from_file(APP, default_timeout=60)
    app.run()
    assert not app.exception
    return app


def test_memory_page_figures_equal_sql(at, demo_db):
    q = demo_db.fetch_one
    assert as_int(metric(at, "Documentos guardados")) == q("SELECT count(*) AS n FROM store")["n"]
    assert as_int(metric(at, "Buscables por significado")) == q("SELECT count(*) AS n FROM store_vectors")["n"]
    assert as_int(metric(at, "Titulares con memoria")) == q("SELECT count(DISTINCT prefix) AS n FROM store")["n"]
    expired = q("SELECT count(*) AS n FROM store WHERE expires_at < now()")["n"]
    assert expired > 0 and as_int(metric(at, "Caducados pendientes de borrar")) == expired
    by_root = frame(at, "root", "documents", "namespaces").set_index("root")["documents"].to_dict()
    holder = {"clientes": "Clientes", "proveedores": "Proveedores", "empleados": "Empleados"}
    sql = {
        holder[r["root"]]: r["n"]
        for r in demo_db.fetch("SELECT split_part(prefix,'.',1) AS root, count(*) AS n FROM store GROUP BY 1")
    }
    assert by_root == sql
    charts = at.get("plotly_chart")
    assert len(charts) == 2


def test_alarm_lists_exactly_the_oversized_customers(at, demo_db):
    alarm = at.dataframe(key="memory.alarm").value
    sql = demo_db.fetch(
        "SELECT split_part(prefix,'.',2) AS c FROM store WHERE prefix LIKE 'clientes.%%' "
        "GROUP BY prefix HAVING count(*) > %s",
        (MAX_DOCS_PER_CUSTOMER,),
    )
    assert (
        sorted(p.removeprefix("clientes.") for p in plain(alarm["cliente_id"]))
        == sorted(r["c"] for r in sql)
        == sorted(demo_db.summary.legacy_customers)
    )


def test_drill_down_into_one_namespace(at, demo_db):
    cid = demo_db.summary.legacy_customers[0]
    at.text_input(key="memory.ns").input(cid).run()
    assert not at.exception
    items = frame(at, "key", "valor", "ttl_days")
    keys = [r["key"] for r in demo_db.fetch("SELECT key FROM store WHERE prefix=%s ORDER BY key", (f"clientes.{cid}",))]
    assert list(items["key"]) == keys and len(keys) > MAX_DOCS_PER_CUSTOMER
    assert {"tipo", "valor", "created_at", "updated_at", "expires_at", "ttl_days", "thread_id"} <= set(items.columns)
    assert (items["ttl_days"] == 365).all()
    assert at.query_params["ns"] == cid


def test_drill_down_by_full_prefix(at, demo_db):
    prefix = demo_db.fetch_one("SELECT prefix FROM store WHERE prefix LIKE 'proveedores.%%' LIMIT 1")["prefix"]
    at.text_input(key="memory.ns").input(prefix).run()
    n = demo_db.fetch_one("SELECT count(*) AS n FROM store WHERE prefix=%s", (prefix,))["n"]
    assert len(frame(at, "key", "valor", "ttl_days")) == n


@pytest.mark.parametrize(
    "text", ["C%", "C_", "%", "_", "clientes.%", "clientes.C_1", "C1'; DROP TABLE store; --", '"C1"', "clientes.", "."]
)
def test_namespace_search_metacharacters_find_nothing(at, demo_db, text):
    before = demo_db.fetch_one("SELECT count(*) AS n FROM store")["n"]
    at.text_input(key="memory.ns").input(text).run()
    assert not at.exception
    assert any("Ningún namespace" in i.value for i in at.info)
    with pytest.raises(KeyError):
        frame(at, "key", "valor", "ttl_days")
    assert demo_db.fetch_one("SELECT count(*) AS n FROM store")["n"] == before


@pytest.mark.parametrize(
    ("text", "why"),
    [("x" * 10_000, "tiene 10.000 caracteres (como máximo 400)"), ("C1\x00", "contiene un carácter NUL")],
    ids=["10k-chars", "nul"],
)
def test_namespace_search_bad_input_is_a_clear_message(at, text, why):
    at.text_input(key="memory.ns").input(text).run()
    assert not at.exception
    shown = md_code(text if len(text) <= 60 else text[:60] + "…")  # the start of what was typed, inert
    assert [e.value for e in at.error] == [f"{shown} no se puede usar: {why}. No se ha consultado ni cambiado nada."]


# The Preferences page's ground truth, decoded live from the canonical checkpoint views (never from
# the extracted core_tool_calls it reads): every chat message with its UTC day, on the same clock the
# extraction uses (the checkpoint's ts, or the demo's replayed time from the run's metadata).
LIVE_MESSAGES = """
SELECT m.thread_id, m.kind, m.tool_calls, m.tool_name, m.status,
       (coalesce(core_try_timestamptz(c.metadata ->> 'core_replayed_at'), m.ts) AT TIME ZONE 'UTC')::date AS day
FROM core_checkpoint_messages_view m
JOIN checkpoints c USING (thread_id, checkpoint_ns, checkpoint_id)
WHERE m.kind IN ('human', 'ai', 'tool')"""


def test_preferences_page_figures_equal_sql(at, demo_db):
    at.switch_page("app_pages/preferences.py").run()
    assert not at.exception
    since, until = date.today() - timedelta(days=29), date.today()
    q = f"WITH live AS ({LIVE_MESSAGES}) "
    conv = demo_db.fetch_one(
        q + "SELECT count(DISTINCT thread_id) AS n FROM live WHERE kind = 'human' AND day BETWEEN %s AND %s",
        (since, until),
    )["n"]
    calls = q + (
        "SELECT l.thread_id, l.day, call -> 'args' ->> 'tipo' AS tipo FROM live l "
        "CROSS JOIN LATERAL jsonb_array_elements(l.tool_calls) AS call "
        "WHERE l.kind = 'ai' AND call ->> 'name' = 'recordar_preferencia' AND l.day BETWEEN %s AND %s"
    )
    live_calls = demo_db.fetch(calls, (since, until))
    writes = len(live_calls)
    assert conv > 0 and writes > 0
    assert as_int(metric(at, "Conversaciones")) == conv
    assert as_int(metric(at, "Escrituras de preferencias")) == writes
    assert metric(at, "Escrituras por conversación") == f"{writes / conv:.3f}".replace(".", ",")
    writers = frame(at, "thread_id", "tipos")
    threads = {c["thread_id"] for c in live_calls}
    assert len(writers) == min(50, len(threads)) and set(plain(writers["thread_id"])) <= threads
    assert all(t.startswith("cliente-") for t in plain(writers["thread_id"]))
    assert len(at.get("plotly_chart")) == 2
    # where our exact fast path exists too, it agrees with the checkpoints: every call whose tool ran
    # wrote one row; a call answered with an error (memory unavailable during the demo's outage) wrote none
    logged = demo_db.fetch_one(
        "SELECT count(*) AS n FROM core_memory_writes WHERE root='clientes' AND key LIKE 'pref-%%' "
        "AND thread_id IS NOT NULL AND written_at::date BETWEEN %s AND %s",
        (since, until),
    )["n"]
    failed = demo_db.fetch_one(
        q + "SELECT count(*) AS n FROM live WHERE kind = 'tool' AND tool_name = 'recordar_preferencia' "
        "AND status = 'error' AND day BETWEEN %s AND %s",
        (since, until),
    )["n"]
    assert logged == writes - failed
    tipos = {c["tipo"] for c in live_calls}
    assert tipos <= {"recogida", "contacto", "idioma", "horario"} and len(tipos) == 4


def test_english_on_request(demo_db, app_env):
    app_env(demo_db.dsn)
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["lang"] = "en"
    at.run()
    assert not at.exception
    assert at.title[0].value == "Cross-thread memory"
    assert {m.label for m in at.metric} >= {"Saved documents", "Searchable by meaning", "Customers with preferences"}


@pytest.mark.slow  # waits out a connect timeout
def test_database_down_at_startup_is_a_clear_page(app_env):
    app_env("postgresql://postgres@127.0.0.1:1/agentes?connect_timeout=2")
    at = AppTest.from_file(APP, default_timeout=30)
    at.run()
    assert not at.exception
    assert at.title[0].value == "No se puede abrir la base de datos de los agentes"
    assert "127.0.0.1:1/agentes" in at.markdown[0].value
    assert at.error and "127.0.0.1" in at.error[0].value


def test_embedding_dims_mismatch_is_a_clear_page(db, app_env):
    app_env(db.dsn, EMBEDDINGS_DIMS="1536")
    at = AppTest.from_file(APP, default_timeout=30)
    at.run()
    assert not at.exception
    assert at.title[0].value == "No se puede abrir la base de datos de los agentes"
    assert "EMBEDDINGS_DIMS=1536" in at.error[0].value and "vector(64)" in at.error[0].value
