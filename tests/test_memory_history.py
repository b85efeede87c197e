"""A memory document's history (issue 56, item 2): every write from the extracted tool calls, our write log and the
store, checked against SQL on the articles' agents' database and on the retail agent's; superseded values, expiry,
expired-but-not-swept, swept; a document's value at a time; a manager of another store sees nothing."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from foreign_agents import CUSTOMERS
from test_memory_flags import RECOGIDA, Shop, scope_of

from core.db import Database
from core.history import tool_calls
from core.ids import InvalidIdentifier
from core.memory import history
from core.memory.store import put_memory
from core.operations import sweep


@pytest.fixture(scope="module")
def article(article_agents_db):
    db = Database(article_agents_db.dsn)
    tool_calls.extract(db)
    yield article_agents_db, db
    db.close()


ARTICLE_CALLS = """
SELECT 'pref-' || (args ->> 'tipo') AS key, args ->> 'valor' AS value, thread_id, ts
FROM core_tool_calls WHERE tool = 'recordar_preferencia' AND thread_id = ANY(%s) ORDER BY ts"""


@pytest.mark.parametrize("customer", CUSTOMERS)
def test_on_the_articles_agents_the_history_is_what_the_database_holds(article, customer):
    written, db = article
    found = history.customer_history(db, customer)
    assert found is not None
    frame = found.frame()
    expected = db.fetch(ARTICLE_CALLS, (written.threads_of(customer, "write"),))
    assert len(expected) == 3  # the script: three preferences, one conversation each
    assert sorted(zip(frame["key"], frame["value"], frame["thread_id"], frame["written_at"], strict=True)) == sorted(
        (r["key"], r["value"], r["thread_id"], r["ts"]) for r in expected
    )
    assert set(frame["source"]) == {history.SOURCE_TOOL_CALL}  # no log: the article's agents write none
    store = {
        r["key"]: r
        for r in db.fetch(
            "SELECT key, value ->> 'valor' AS valor, value ->> 'hilo' AS hilo, expires_at, expires_at > now() AS live "
            "FROM store WHERE prefix = %s",
            (f"clientes.{customer}",),
        )
    }
    assert set(store) == set(frame["key"])
    for row in frame.itertuples():
        assert row.current and not row.superseded
        assert row.value == store[row.key]["valor"] == written.declared(customer)[row.key.removeprefix("pref-")]
        assert row.thread_id == store[row.key]["hilo"]
        assert row.expires_at == store[row.key]["expires_at"] and row.visible_to_agent == store[row.key]["live"]
        assert row.thread_held is True


def test_the_look_alike_ids_never_share_a_history(article):
    _, db = article
    mine = history.customer_history(db, "C9")
    assert mine is not None and set(mine.frame()["prefix"]) == {"clientes.C9"}
    for other in ("C19", "C9x", "C_9", "C%"):
        assert not set(mine.threads) & set(history.customer_history(db, other).threads)  # type: ignore[union-attr]


@pytest.mark.slow  # the real retail agent writes a database for this test
def test_an_overwrite_is_superseded_and_the_value_at_a_time_is_the_write_before_it(db):
    shop = Shop(db)
    shop.say("H1", "cliente-H1-1", RECOGIDA.format("Sierpes"))
    between = datetime.now(UTC)
    shop.say("H1", "cliente-H1-2", RECOGIDA.format("Goya"))
    shop.settle()
    found = history.customer_history(db, "H1")
    assert found is not None
    writes = found.of("clientes.H1", "pref-recogida")
    assert [(w.value, w.thread_id, w.superseded, w.current, w.confirmed_by_log, w.source) for w in writes] == [
        ("Sierpes", "cliente-H1-1", True, False, True, history.SOURCE_TOOL_CALL),
        ("Goya", "cliente-H1-2", False, True, True, history.SOURCE_TOOL_CALL),
    ]
    assert {w.agent for w in writes} == {"atencion-cliente"} and {w.tool for w in writes} == {"recordar_preferencia"}
    logged = db.fetch(
        "SELECT thread_id FROM core_memory_writes WHERE prefix = 'clientes.H1' AND key = 'pref-recogida' "
        "ORDER BY written_at"
    )
    assert [r["thread_id"] for r in logged] == ["cliente-H1-1", "cliente-H1-2"]
    then = history.value_at(db, "clientes.H1", "pref-recogida", between)
    assert (then.known, then.value, then.thread_id) == (True, "Sierpes", "cliente-H1-1")
    now = history.value_at(db, "clientes.H1", "pref-recogida", datetime.now(UTC))
    assert (now.known, now.value) == (True, "Goya")
    before = history.value_at(db, "clientes.H1", "pref-recogida", writes[0].written_at - timedelta(seconds=1))
    assert (before.known, before.value, before.reason) == (False, None, "no_write_before")
    assert history.value_at(db, "proveedores.P1", "aviso-retraso", between).reason == "not_a_customer"


@pytest.mark.slow  # the real retail agent writes a database for this test
def test_expired_not_swept_is_hidden_from_the_agent_and_a_swept_one_is_gone(db):
    shop = Shop(db)
    shop.say("E1", "cliente-E1-1", RECOGIDA.format("Sierpes"))
    put_memory(  # the write every tool makes, with a validity shorter than the namespace's
        shop.store,
        ("clientes", "E1"),
        "pref-horario",
        {"tipo": "horario", "valor": "mañanas", "texto": "horario: mañanas"},
        thread_id="cliente-E1-1",
        agent="atencion-cliente",
        valid_for_minutes=0.001,
    )
    time.sleep(0.2)
    shop.settle()
    found = history.customer_history(db, "E1")
    assert found is not None
    doc = found.documents[("clientes.E1", "pref-horario")]
    assert (doc.state, doc.visible_to_agent, doc.value) == (history.EXPIRED, False, "mañanas")
    assert found.documents[("clientes.E1", "pref-recogida")].visible_to_agent
    # the logged write's value is the one the store holds (no tool call wrote it)
    [write] = found.of("clientes.E1", "pref-horario")
    assert (write.source, write.value, write.current) == (history.SOURCE_LOG, "mañanas", True)
    assert (
        db.fetch_one("SELECT count(*) AS n FROM store WHERE prefix = 'clientes.E1' AND expires_at <= now()")["n"] == 1
    )
    run = sweep.run_sweep(db, trigger="manual")
    after = history.customer_history(db, "E1")
    assert after is not None
    gone = after.documents[("clientes.E1", "pref-horario")]
    assert gone.state == history.GONE and not gone.visible_to_agent
    assert (
        gone.swept_at
        == db.fetch_one("SELECT started_at FROM core_sweep_log WHERE id = %s", (run.run_id,))["started_at"]
    )
    [write] = after.of("clientes.E1", "pref-horario")
    assert write.superseded and not write.current


@pytest.mark.slow  # the real retail agent writes a database for this test
def test_a_value_the_store_holds_that_no_known_write_gave_is_shown_as_the_stores(db):
    shop = Shop(db)
    shop.say("V1", "cliente-V1-1", RECOGIDA.format("Sierpes"))
    shop.settle()
    # the conversation that wrote a newer value is not in the database (e.g. erased before its calls were read):
    # the store's value is its own entry, and the call's value is superseded
    shop.store.put(("clientes", "V1"), "pref-recogida", {"tipo": "recogida", "valor": "Goya", "hilo": "gone-1"})
    found = history.customer_history(db, "V1")
    assert found is not None
    writes = found.of("clientes.V1", "pref-recogida")
    assert [(w.value, w.source, w.thread_id, w.superseded) for w in writes] == [
        ("Sierpes", history.SOURCE_TOOL_CALL, "cliente-V1-1", True),
        ("Goya", history.SOURCE_STORE, "gone-1", False),
    ]


@pytest.mark.slow  # the real retail agent writes a database for this test
def test_a_manager_of_another_store_gets_no_history(db):
    shop = Shop(db)
    shop.say("M1", "cliente-M1-1", RECOGIDA.format("Sierpes"), tienda="T001")
    shop.settle()
    assert history.customer_history(db, "M1", scope=scope_of(db, "T002")) is None
    mine = history.customer_history(db, "M1", scope=scope_of(db, "T001"))
    assert mine is not None and len(mine.writes) == 1


@pytest.mark.parametrize("bad", ["", "C9.x", "a\x00b", "x" * 10_000])
def test_a_bad_customer_id_is_a_clear_error(db, bad):
    with pytest.raises(InvalidIdentifier):
        history.customer_history(db, bad)
    with pytest.raises(InvalidIdentifier):
        history.value_at(db, "clientes.C9", bad.replace(".", "\x00"), datetime.now(UTC))
    if "." not in bad:  # `clientes.C9.x` is a nested namespace
        with pytest.raises(InvalidIdentifier):
            history.value_at(db, f"clientes.{bad}", "pref-recogida", datetime.now(UTC))
