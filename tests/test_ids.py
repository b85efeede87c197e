"""Typed ids (core/ids.py): `CustomerId.parse` applies the label rule exactly as `validate_label` does (same
refusals, same InvalidIdentifier messages), and a value that already is a CustomerId is never validated again."""

from __future__ import annotations

import copy
import json
import pickle

import pytest

from core import ids
from core.ids import CustomerId, InvalidIdentifier, validate_label
from core.memory import store

BAD = ["", "   ", " C9", "C9 ", "C.9", "C9\x00", "C\x009", "x" * 201, "x" * 10_000, None, 9, b"C9", ["C9"]]
GOOD = ["C9", "C_9", "C%", "O'Brien", 'C"9', "cliente-ñ", "x" * 200]


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_parse_refuses_what_the_label_rule_refuses_with_the_same_message(bad):
    with pytest.raises(InvalidIdentifier) as rule:
        validate_label(bad, "customer id")
    with pytest.raises(InvalidIdentifier) as parsed:
        CustomerId.parse(bad)
    assert str(parsed.value) == str(rule.value)
    assert str(parsed.value).startswith("customer id ")
    with pytest.raises(InvalidIdentifier) as built:
        CustomerId(bad)  # no way round the rule
    assert str(built.value) == str(rule.value)


@pytest.mark.parametrize("good", GOOD, ids=repr)
def test_a_parsed_id_is_the_same_text(good):
    cid = CustomerId.parse(good)
    assert isinstance(cid, CustomerId) and isinstance(cid, str)
    assert cid == good and hash(cid) == hash(good) and f"clientes.{cid}" == f"clientes.{good}"
    assert json.dumps({"id": cid}) == json.dumps({"id": good})


def test_a_customer_id_is_not_validated_again(monkeypatch):
    calls = []
    rule = ids.validate_label
    monkeypatch.setattr(ids, "validate_label", lambda *a: calls.append(a) or rule(*a))
    cid = CustomerId.parse("C9")
    assert CustomerId.parse(cid) is cid
    assert calls == [("C9", "customer id")]


def test_a_customer_id_survives_pickle_and_copy():
    """Streamlit's cache and session state may copy or pickle a value holding one."""
    cid = CustomerId.parse("C9")
    for back in (pickle.loads(pickle.dumps(cid)), copy.copy(cid), copy.deepcopy(cid)):
        assert back == cid and type(back) is CustomerId


def test_the_store_still_exports_the_label_rule():
    """Pages and tests import the rule and its error from core.memory.store, its old home: one object, not a copy."""
    assert store.InvalidIdentifier is InvalidIdentifier
    assert store.validate_label is validate_label
    assert store.MAX_LABEL_LENGTH == ids.MAX_LABEL_LENGTH == 200


# --- validated once, on the real database ---------------------------------------------------------------------

HOSTILE = ["", "   ", " C9", "C.9", "clientes.C9", "C9\x00", "x" * 10_000, None, 9]


def customer_with_data(db, customer: str = "C9") -> None:
    """Documents and a conversation of real agents for `customer`, and a look-alike's document."""
    from langgraph.checkpoint.postgres import PostgresSaver

    from core.agents.retail import ContextoCliente, build_agent, run_turn
    from core.agents.scripted_model import ScriptedChatModel
    from core.memory.embeddings import OfflineHashEmbeddings
    from core.memory.store import build_store, put_memory
    from tests.conftest import DIMS

    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    for i in range(3):
        put_memory(store, ("clientes", customer), f"doc-{i}", {"texto": f"pedido {i} de {customer}"})
    put_memory(store, ("clientes", "C_9"), "doc-0", {"texto": "pedido de otro cliente"})
    agent = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=PostgresSaver(db.pool))
    run_turn(agent, ContextoCliente(customer), f"cliente-{customer}-1", "Prefiero recoger en la tienda Sierpes.")


@pytest.fixture
def rule_calls(monkeypatch):
    """Every time the label rule checks a customer id from now on (the rule wrapped, not replaced)."""
    calls: list[object] = []
    rule = ids.validate_label

    def counted(label, what="id"):
        if what == CustomerId.WHAT:
            calls.append(label)
        return rule(label, what)

    monkeypatch.setattr(ids, "validate_label", counted)
    return calls


@pytest.fixture
def parse_calls(monkeypatch):
    """Every call of CustomerId.parse from now on (wrapped, not replaced), with what it was given."""
    calls: list[object] = []
    parse = CustomerId.parse.__func__

    def counted(cls, raw):
        calls.append(raw)
        return parse(cls, raw)

    monkeypatch.setattr(CustomerId, "parse", classmethod(counted))
    return calls


def test_an_erasure_validates_the_customer_id_once(db, rule_calls, parse_calls):
    from core.privacy import erasure

    customer_with_data(db)
    rule_calls.clear()
    result = erasure.erase(db, "C9", operator="dpo@example.com")
    assert result.complete and result.counts_before["store"] == 3 and result.thread_ids == ["cliente-C9-1"]
    assert rule_calls == ["C9"]  # once, at erase()'s top; the resolver, residue and evidence trust it
    assert parse_calls == ["C9"]
    assert db.fetch_one("SELECT count(*) AS n FROM store WHERE prefix = 'clientes.C_9'")["n"] == 1


def test_the_erasure_page_path_validates_once_preview_then_erase(db, rule_calls):
    """The page previews the typed text, then erases the preview's id: one check for both."""
    from core.privacy import erasure, evidence

    customer_with_data(db)
    rule_calls.clear()
    shown = evidence.preview(db, "C9")
    assert type(shown.customer_id) is CustomerId and shown.counts["store"] == 3
    result = erasure.erase(db, shown.customer_id, operator="dpo@example.com")
    assert result.complete
    assert rule_calls == ["C9"]


def test_access_export_and_recheck_validate_once(db, rule_calls):
    from core.privacy import access, erasure, erasure_register

    customer_with_data(db)
    rule_calls.clear()
    done = access.export(db, "C9", fmt="json", lang="es", operator="dpo")
    assert done.register_id and rule_calls == ["C9"]  # gather, the resolver and the residue scan: one check
    request = erasure.erase(db, "C9", operator="dpo@example.com").request_id
    rule_calls.clear()
    assert erasure_register.recheck(db, request).clean
    assert rule_calls == ["C9"]  # the id read back from the register, checked once


def table_counts(db) -> dict[str, int]:
    tables = ("store", "checkpoints", "core_memory_writes", "core_erasure_register", "core_access_register")
    return {t: db.fetch_one(f"SELECT count(*) AS n FROM {t}")["n"] for t in tables}


def test_hostile_ids_are_refused_at_every_public_door_and_change_nothing(db):
    """Each door parses the id before it reads or writes anything, with the label rule's own message."""
    from core.privacy import access, erasure, evidence
    from core.privacy import residue as res
    from core.privacy import subjects as subj

    customer_with_data(db)
    before = table_counts(db)
    for bad in HOSTILE:
        with pytest.raises(InvalidIdentifier) as rule:
            validate_label(bad, "customer id")
        doors = {
            "erase": lambda bad=bad: erasure.erase(db, bad, operator="dpo@example.com"),
            "preview": lambda bad=bad: evidence.preview(db, bad),
            "find_threads": lambda bad=bad: evidence.find_threads(db, bad),
            "run_evidence": lambda bad=bad: evidence.run_evidence(db, bad, []),
            "resolve": lambda bad=bad: subj.resolve(db, bad),
            "residue_scan": lambda bad=bad: res.residue_scan(db, bad),
            "gather": lambda bad=bad: access.gather(db, bad),
            "export": lambda bad=bad: access.export(db, bad, fmt="json", lang="es", operator="dpo"),
        }
        for door, call in doors.items():
            with pytest.raises(InvalidIdentifier) as info:
                call()
            assert str(info.value) == str(rule.value), (door, bad)
    assert table_counts(db) == before


# --- thread ids and namespace searches: parsed where they enter, as they are when already parsed --------------------


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("", "thread id is empty"),
        ("  ", "thread id is empty"),
        ("a\x00b", "thread id contains a NUL character"),
        ("x" * (ids.MAX_THREAD_ID_LENGTH + 1), "thread id is 1001 characters long"),
        (None, "thread id must be text"),
    ],
    ids=["empty", "blank", "nul", "huge", "none"],
)
def test_a_thread_id_that_can_name_no_thread_is_refused_saying_why(bad, why):
    with pytest.raises(InvalidIdentifier, match=why):
        ids.ThreadId.parse(bad)


@pytest.mark.parametrize("good", ["conv-1b2c", "cliente.C9.2", "50%_a'b\"", " padded ", "x" * 1000], ids=repr)
def test_a_thread_id_keeps_every_character_and_is_parsed_once(good):
    thread = ids.ThreadId.parse(good)
    assert thread == good and ids.ThreadId.parse(thread) is thread


@pytest.mark.parametrize(
    ("bad", "why"),
    [("", "type a namespace"), ("   ", "type a namespace"), ("C\x009", "NUL"), ("x" * 401, "401 characters long")],
    ids=["empty", "blank", "nul", "huge"],
)
def test_a_namespace_search_that_can_find_nothing_is_refused_saying_why(bad, why):
    with pytest.raises(InvalidIdentifier, match=why):
        ids.NamespaceSearch.parse(bad)


def test_a_namespace_search_is_stripped_once_and_keeps_wildcards_literal():
    search = ids.NamespaceSearch.parse("  clientes.C_9%  ")
    assert search == "clientes.C_9%" and ids.NamespaceSearch.parse(search) is search


REFUSALS = [
    lambda: validate_label(9, "customer id"),
    lambda: validate_label(" ", "customer id"),
    lambda: validate_label(" C9", "customer id"),
    lambda: validate_label("x" * 201, "customer id"),
    lambda: validate_label("C\x009", "customer id"),
    lambda: validate_label("C.9", "customer id"),
    lambda: ids.ThreadId.parse("x" * 1001),
    lambda: ids.NamespaceSearch.parse(""),
]


def test_every_refusal_names_its_rule_and_each_language_says_it():
    """A page shows why an id was refused in its reader's language (ui.errors.invalid_id): every rule has a text in
    both catalogues, with its figures."""
    from ui.i18n import CATALOGUES

    reasons = set()
    for refuse in REFUSALS:
        with pytest.raises(InvalidIdentifier) as info:
            refuse()
        reasons.add(info.value.reason)
        for catalogue in CATALOGUES.values():
            text = catalogue[f"invalid_id_{info.value.reason}"]
            assert text.format(**info.value.detail) and all("{" + k + "}" in text for k in info.value.detail)
    assert reasons == {"not_text", "empty", "whitespace", "too_long", "nul", "dot"}
