"""A purpose typed when viewing a customer's data may hold that customer's personal data: erasing the customer
redacts it in every view of theirs (by id, and of their threads), each redaction recorded so the 'views' chain still
verifies (migration 088); the erasure's evidence counts such purposes (0 after), a re-check stays clean. On our
agents and on the article's agents' database."""

from __future__ import annotations

import psycopg
import pytest
from conftest import login_role
from foreign_agents import CUSTOMERS

from core.db import Database
from core.privacy import chain, erasure, erasure_register, evidence
from core.privacy.data_views import View, log_views
from tests.test_attribution import DEFAULT
from tests.test_definer_safety import AGENT_TABLES
from tests.test_erasure import agents_for, converse, make_store, write_docs

HOLDING = "SELECT count(*) AS n FROM core_data_views v WHERE to_jsonb(v)::text LIKE %s"


def holding(db: Database, value: str) -> int:
    """Rows of core_data_views holding `value` in any column."""
    return db.fetch_one(HOLDING, (f"%{value}%",))["n"]


def dpo_view(target: str, customer: str | None, purpose: str | None, kind: str = "namespace") -> View:
    return View("dpo@example.com", "dpo", kind, target, customer, purpose)


def test_erasure_redacts_the_purposes_typed_for_our_customer_and_the_chains_verify(db):
    store = make_store(db)
    write_docs(store, "C1", 2)
    write_docs(store, "C2", 1)
    (thread,) = converse(agents_for(db, store), "C1")
    typed = "reclamación de Ana Pérez Gil, tel. 600 111 222"
    log_views(
        db,
        [
            dpo_view("clientes.C1", "C1", typed),
            dpo_view(thread, None, f"{typed} (su conversación)", kind="thread"),  # a thread, no customer named
            dpo_view("clientes.C1", "C1", None),  # no purpose asked for
            dpo_view("clientes.C2", "C2", "incidencia 77 de C2"),
        ],
    )
    assert holding(db, "Ana Pérez Gil") == 2
    result = erasure.erase(db, "C1", operator="dpo@example.com")
    assert result.status == "complete", result.report
    assert holding(db, "Ana Pérez Gil") == 0 and holding(db, "600 111 222") == 0
    assert (
        db.fetch_one("SELECT purpose FROM core_data_views WHERE customer_id = 'C2'")["purpose"] == "incidencia 77 de C2"
    )  # another customer's view is not touched
    redacted = [
        r["purpose"]
        for r in db.fetch("SELECT purpose FROM core_data_views WHERE purpose LIKE '[redacted%' ORDER BY id")
    ]
    assert redacted == [f"[redacted: erasure request #{result.request_id}]"] * 2
    assert db.fetch_one("SELECT count(*) AS n FROM core_data_views")["n"] == 4  # the views stay: a proof
    # the evidence says so: counted before, redacted, 0 after; the register keeps the query, never the value
    assert result.counts_before[evidence.VIEW_PURPOSES] == 2 and result.deleted[evidence.VIEW_PURPOSES] == 2
    (ev,) = [e for e in result.evidence if e.table == evidence.VIEW_PURPOSES]
    assert ev.result == 0 and "Ana" not in ev.sql and "'C1'" in ev.sql
    views, erased = chain.verify(db, "views"), chain.verify(db, "erasure")
    assert views.ok and erased.ok, (views, erased)
    assert sorted(r.fields for r in views.redactions) == [("purpose",), ("purpose",)]
    assert erasure_register.recheck(db, result.request_id).clean
    # a second erasure finds nothing more to redact (each row is redacted once)
    again = erasure.erase(db, "C1", operator="dpo@example.com")
    assert again.counts_before.get(evidence.VIEW_PURPOSES) == 0 and chain.verify(db, "views").ok


def test_a_purpose_typed_after_the_erasure_is_found_by_the_recheck(db):
    store = make_store(db)
    write_docs(store, "C1", 1)
    result = erasure.erase(db, "C1", operator="dpo@example.com")
    log_views(db, [dpo_view("clientes.C1", "C1", "vuelve a llamar Ana Pérez Gil")])
    check = erasure_register.recheck(db, result.request_id)
    assert not check.clean and check.counts[evidence.VIEW_PURPOSES] == 1


def test_the_article_agents_database(article_agents):
    foreign = article_agents()
    db = Database(foreign.dsn)
    try:
        mine, theirs = foreign.threads_of("C9"), foreign.threads_of("C19")
        value = foreign.declared("C9")["horario"]  # "tardes de C9 a las 17h": what the customer said
        log_views(
            db,
            [
                dpo_view("clientes.C9", "C9", f"llamada sobre {value}"),
                dpo_view(mine[0], None, f"revisar {value}", kind="thread"),
                dpo_view(theirs[0], None, "revisar su horario", kind="thread"),
            ],
        )
        preview = evidence.preview(db, "C9", DEFAULT)
        assert preview.counts[evidence.VIEW_PURPOSES] == 2
        result = erasure.erase(
            db,
            "C9",
            operator="dpo@example.com",
            config=DEFAULT,
            decisions={t: "erase" for t in preview.residue_threads},
        )
        assert result.status == "complete", result.report
        assert holding(db, value) == 0 and holding(db, "revisar su horario") == 1  # C19's thread view stays
        assert result.deleted[evidence.VIEW_PURPOSES] == 2
        assert chain.verify(db, "views").ok and chain.verify(db, "erasure").ok
        assert erasure_register.recheck(db, result.request_id).clean
        assert set(CUSTOMERS) >= {"C9", "C19"}
    finally:
        db.close()


@pytest.mark.parametrize(
    "args, error",
    [
        (("", [], 1), "a customer id is required"),
        (("C1", [], 999), "is not an erasure request of customer C1"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(db, args, error):
    log_views(db, [dpo_view("clientes.C1", "C1", "Ana Pérez Gil")])
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=error):
        db.execute("SELECT core_redact_view_purposes(%s, %s, %s)", args)
    assert holding(db, "Ana Pérez Gil") == 1 and chain.verify(db, "views").ok


def test_a_request_of_another_customer_redacts_nothing(db):
    store = make_store(db)
    write_docs(store, "C2", 1)
    other = erasure.erase(db, "C2", operator="dpo@example.com")
    log_views(db, [dpo_view("clientes.C1", "C1", "Ana Pérez Gil")])
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        db.execute("SELECT core_redact_view_purposes('C1', '{}', %s)", (other.request_id,))
    assert holding(db, "Ana Pérez Gil") == 1


def test_an_agent_role_cannot_redact(db):
    log_views(db, [dpo_view("clientes.C1", "C1", "Ana Pérez Gil")])
    agent = login_role(db.dsn, "agent", AGENT_TABLES)
    with psycopg.connect(agent, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT core_redact_view_purposes('C1', '{}', 1)")
    assert holding(db, "Ana Pérez Gil") == 1


def test_a_purpose_typed_on_another_customers_view_naming_ours_is_redacted(db):
    """Issue 42: a purpose typed while viewing C2 that names C1 is C1's data too; erasing C1 redacts it (the id as a
    word: a purpose naming C10 is not C1's), the evidence counts it, and the chains still verify."""
    store = make_store(db)
    write_docs(store, "C1", 1)
    write_docs(store, "C2", 1)
    log_views(
        db,
        [
            dpo_view("clientes.C2", "C2", "llamó por la reclamación de C1 (Ana Pérez Gil)"),
            dpo_view("clientes.C2", "C2", "incidencia de c1: misma dirección"),
            dpo_view("clientes.C2", "C2", "incidencia 77 de C2, ver también C10"),
        ],
    )
    result = erasure.erase(db, "C1", operator="dpo@example.com")
    assert result.status == "complete", result.report
    assert holding(db, "Ana Pérez Gil") == 0 and holding(db, "misma dirección") == 0
    assert holding(db, "incidencia 77 de C2, ver también C10") == 1
    assert result.counts_before[evidence.VIEW_PURPOSES] == 2 and result.deleted[evidence.VIEW_PURPOSES] == 2
    (ev,) = [e for e in result.evidence if e.table == evidence.VIEW_PURPOSES]
    assert ev.result == 0 and "Ana" not in ev.sql
    assert chain.verify(db, "views").ok and chain.verify(db, "erasure").ok
    log_views(db, [dpo_view("clientes.C2", "C2", "otra vez C1")])
    check = erasure_register.recheck(db, result.request_id)
    assert not check.clean and check.counts[evidence.VIEW_PURPOSES] == 1
