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
