"""Who looked at a customer's data (issue 31 item 4), AppTest: Memory, Checkpoints and Access log each look once,
with the purpose when the configuration requires one; a failed log is a warning and the page still shows; the DPO
reads the log by customer on Registro de accesos and verifies its chain; the art. 15 export lists it."""

from __future__ import annotations

import json
import time

import psycopg
import pytest
from apptools import frame

from core.db import Database, reset_pool
from core.privacy import access, data_views
from tests.test_access_pages import dashboard, texts
from tests.test_erasure import agents_for, converse, make_store, write_docs

VIEWS = "SELECT viewer, role, kind, customer_id, target, purpose FROM core_data_views ORDER BY id"


@pytest.fixture
def shop(create_database):
    db = Database(create_database())
    store = make_store(db)
    agent = agents_for(db, store)
    write_docs(store, "C9", 3)
    converse(agent, "C9")
    write_docs(store, "C90", 2)
    yield db
    reset_pool(db.dsn)


def documents(db, customer: str) -> int:
    return db.fetch_one("SELECT count(*) AS n FROM store WHERE prefix = %s", (f"clientes.{customer}",))["n"]


def thread_of(db, customer: str) -> str:
    return db.fetch_one("SELECT thread_id FROM checkpoints WHERE metadata->>'cliente_id' = %s LIMIT 1", (customer,))[
        "thread_id"
    ]


def test_memory_checkpoints_and_access_each_log_one_view(shop, app_env):
    app_env(shop.dsn)
    at = dashboard("app_pages/memory.py", ns="clientes.C9")
    assert len(frame(at, "key", "valor")) == documents(shop, "C9")
    at.run()  # a rerun is not another look
    thread = thread_of(shop, "C9")
    dashboard("app_pages/checkpoints.py", thread=thread)
    at = dashboard("app_pages/access.py", cliente="C9")
    assert not at.exception
    assert data_views.flush(shop)  # written in the background, a moment later
    assert shop.fetch(VIEWS) == [
        {
            "viewer": "local",
            "role": "manager",
            "kind": "namespace",
            "customer_id": "C9",
            "target": "clientes.C9",
            "purpose": None,
        },
        {"viewer": "local", "role": "sre", "kind": "thread", "customer_id": "C9", "target": thread, "purpose": None},
        {
            "viewer": "local",
            "role": "dpo",
            "kind": "access_preview",
            "customer_id": "C9",
            "target": "art15:C9",
            "purpose": None,
        },
    ]
    # the art. 15 export lists who looked (a log of its own, rendered like the others)
    report = access.gather(shop, "C9")
    assert [(v["kind"], v["target"]) for v in report.logs["data_views"]] == [
        ("namespace", "clientes.C9"),
        ("thread", thread),
        ("access_preview", "art15:C9"),
    ]
    assert report.counts["data_views"] == 3
    html = access.export(shop, "C9", fmt="html", lang="es", operator="dpo@example.com").data.decode()
    # the customer reads the conversation viewed in their words (issue 54 #8b), the JSON keeps its thread id
    assert "Consultas de sus datos por nuestro personal (3)" in html and "Conversación 1" in html
    assert thread not in html
    data = json.loads(access.export(shop, "C9", fmt="json", lang="es", operator="dpo@example.com").data)
    assert thread in json.dumps(data)
    assert "data_views (3)" not in html and "personal de la empresa (modo local, sin identificar)" in html


def test_a_required_purpose_gates_the_data_and_is_logged(shop, app_env):
    app_env(shop.dsn, DATA_VIEWS_PURPOSE="1")
    at = dashboard("app_pages/memory.py", ns="clientes.C9")
    assert not [d for d in at.dataframe if "valor" in d.value.columns]
    assert "Escriba la finalidad" in texts(at) and shop.fetch(VIEWS) == []
    at.text_input(key="data_views.purpose").input("reclamación 1234").run()
    assert not at.exception and len(frame(at, "key", "valor")) == documents(shop, "C9")
    assert data_views.flush(shop)
    assert [(r["kind"], r["purpose"]) for r in shop.fetch(VIEWS)] == [("namespace", "reclamación 1234")]


def test_a_hung_database_never_delays_the_page_and_the_views_arrive_once_it_is_free(shop, app_env):
    app_env(shop.dsn)
    dashboard("app_pages/memory.py", ns="clientes.C90")  # warm: the page's own reads cached, the writer started
    started = time.monotonic()
    dashboard("app_pages/memory.py", ns="clientes.C90")  # the same page, the database free: the baseline
    free = time.monotonic() - started
    assert data_views.flush(shop)
    holder = psycopg.connect(shop.dsn)
    holder.execute("LOCK TABLE core_data_views IN SHARE MODE")  # reads go on, every INSERT waits
    try:
        started = time.monotonic()
        at = dashboard("app_pages/memory.py", ns="clientes.C9")
        took = time.monotonic() - started
        assert len(frame(at, "key", "valor")) == documents(shop, "C9")
        # nothing to warn about: the view waits in the queue
        assert not [w for w in at.warning if "registro de accesos" in w.value], texts(at)
        time.sleep(1.5)
        assert data_views.unrecorded(shop).waiting == 1
        print(f"memory page: {free:.2f} s with the database free, {took:.2f} s with the log's table locked")
    finally:
        holder.rollback()
        holder.close()
    assert data_views.flush(shop)
    assert [r["target"] for r in shop.fetch(VIEWS)] == ["clientes.C90", "clientes.C90", "clientes.C9"]


def test_the_dpo_is_told_what_was_not_recorded(shop, app_env):
    app_env(shop.dsn)
    data_views.queue_for(shop, capacity=1, retry_s=0.2)
    holder = psycopg.connect(shop.dsn)
    holder.execute("LOCK TABLE core_data_views IN SHARE MODE")  # reads go on, every INSERT waits
    try:
        dashboard("app_pages/memory.py", ns="clientes.C9")  # queued
        at = dashboard("app_pages/memory.py", ns="clientes.C90")  # no room: lost, and the viewer is told
        assert any("1 consulta no cabe en la cola" in w.value for w in at.warning), texts(at)
        time.sleep(1.5)  # the writer has tried (lock_timeout 1 s)
        at = dashboard("app_pages/access_register.py")
        said = texts(at)
        assert "1 consultas de datos de clientes no quedaron registradas desde" in said
        assert "1 consultas esperan desde" in said and "lock timeout" in said
    finally:
        holder.rollback()
        holder.close()
    assert data_views.flush(shop)
    at = dashboard("app_pages/access_register.py")
    said = texts(at)
    assert "1 consultas de datos de clientes no quedaron registradas desde" in said and "esperan" not in said
    assert frame(at, "viewer", "target")["target"].tolist() == ["clientes.C9"]


def test_the_dpo_reads_who_looked_by_customer_and_verifies_the_chain(shop, app_env):
    app_env(shop.dsn)
    dashboard("app_pages/memory.py", ns="clientes.C9")
    dashboard("app_pages/memory.py", ns="clientes.C90")
    assert data_views.flush(shop)
    at = dashboard("app_pages/access_register.py")
    assert sorted(frame(at, "viewer", "target")["target"]) == ["clientes.C9", "clientes.C90"]
    at.text_input(key="access_register.views_customer").input("C90").run()
    seen = frame(at, "viewer", "target")
    assert seen["target"].tolist() == ["clientes.C90"] and seen["kind"].tolist() == ["memoria del titular"]
    at.button(key="access_register.verify_views").click().run()
    assert any("Cadena íntegra: 2 filas selladas" in s.value for s in at.success), texts(at)
    rid = shop.fetch_one("SELECT id FROM core_data_views WHERE target = 'clientes.C9'")["id"]
    shop.execute("UPDATE core_data_views SET viewer = 'nadie' WHERE id = %s", (rid,))
    at.button(key="access_register.verify_views").click().run()
    assert any(f"core_data_views #{rid}" in e.value for e in at.error), texts(at)
    at.text_input(key="access_register.views_customer").input("C\x009").run()
    assert not at.exception and at.error


def test_english_labels(shop, app_env):
    app_env(shop.dsn, LOCAL_ROLES="dpo")
    at = dashboard("app_pages/access_register.py", lang="en")
    assert any(tab.label == "Who looked at the data" for tab in at.tabs)
