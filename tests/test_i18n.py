"""The UI string catalogues (ui/locales/*.toml): same keys in both languages, no empty text, same placeholders."""

from __future__ import annotations

import string

from ui import i18n


def placeholders(text: str) -> set[str]:
    return {field for _, field, _, _ in string.Formatter().parse(text) if field is not None}


def check_catalogues(es: dict[str, str], en: dict[str, str]) -> list[str]:
    """Every problem found, one line each; empty when the two catalogues agree."""
    problems = [f"only in es: {k}" for k in sorted(set(es) - set(en))]
    problems += [f"only in en: {k}" for k in sorted(set(en) - set(es))]
    for name, catalogue in (("es", es), ("en", en)):
        problems += [
            f"empty in {name}: {k}" for k, v in sorted(catalogue.items()) if not isinstance(v, str) or not v.strip()
        ]
    for k in sorted(set(es) & set(en)):
        if isinstance(es[k], str) and isinstance(en[k], str) and placeholders(es[k]) != placeholders(en[k]):
            problems.append(
                f"placeholders differ in {k}: es {sorted(placeholders(es[k]))} en {sorted(placeholders(en[k]))}"
            )
    return problems


def test_catalogues_agree():
    es, en = i18n.load_catalogue("es"), i18n.load_catalogue("en")
    assert len(es) > 500  # every module's strings are in the catalogue, not only a few
    assert check_catalogues(es, en) == []


def test_check_catalogues_catches_each_kind_of_mistake():
    es = {"a": "uno {n}", "b": "dos", "c": "tres {x:.0f}", "d": "cuatro", "lit": "`pref-{{tipo}}` {n}"}
    en = {"a": "one {m}", "b": " ", "c": "three {x}", "e": "five", "lit": "`pref-{{tipo}}` {n}"}
    assert check_catalogues(es, en) == [
        "only in es: d",
        "only in en: e",
        "empty in en: b",
        "placeholders differ in a: es ['n'] en ['m']",
    ]


def test_t_uses_the_language_and_falls_back_to_spanish(monkeypatch):
    import streamlit as st

    monkeypatch.setattr(st, "session_state", {"lang": "en"})
    assert i18n.t("retry") == "Retry"
    assert i18n.t("db_down", error="x") == "NOT reachable: x"
    monkeypatch.setattr(st, "session_state", {"lang": "fr"})
    assert i18n.t("retry") == "Reintentar"
    monkeypatch.setattr(st, "session_state", {})
    assert i18n.t("retry") == "Reintentar"
