"""The UI string catalogues (ui/locales/*.toml): same keys in both languages, no empty text, same placeholders."""

from __future__ import annotations

import string

import pytest

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


# Give-away words of each language (regexes): a page in the other language must show none of them in our own words
# (apptools.visible_texts: data as agents and customers wrote it is left out). Short and curated: words no
# technical term of either UI shares.
SPANISH_WORDS = {
    "barrido": r"(?i)\bbarridos?\b",
    "borrado": r"(?i)\bborrados?\b",
    "hilo": r"(?i)\bhilos?\b",
    "conversación": r"(?i)\bconversaci[oó]n(es)?\b",
    "caducado": r"(?i)\bcaducad[oa]s?\b",
    "según": r"(?i)\bsegún\b",
    "ningún": r"(?i)\bning[uú]n[oa]?\b",
    "último": r"(?i)\búltim[oa]s?\b",
    "fecha": r"(?i)\bfechas?\b",
    "cifras": r"(?i)\bcifras\b",
    "filas": r"(?i)\bfilas\b",
    "días": r"(?i)\bd[ií]as\b",
    "clientes": r"(?i)\bclientes\b(?![.\w-])",  # a prefix (clientes.C9) is a namespace as agents write it
    "empleados": r"(?i)\bempleados\b(?![.\w-])",
    "proveedores": r"(?i)\bproveedores\b(?![.\w-])",
    "n.º": r"n\.º",
    "Spanish month": r"\b(ene|feb|abr|jun|jul|sept?|dic)\b",
}
ENGLISH_WORDS = {
    "the": r"(?i)\bthe\b",
    "which": r"(?i)\bwhich\b",
    "below": r"(?i)\bbelow\b",
    "overlap": r"(?i)\boverlap\b",
    "only": r"(?i)\bonly\b",
    "never": r"(?i)\bnever\b",
    "with": r"(?i)\bwith\b",
    "from": r"(?i)\bfrom\b",
    "and": r"\band\b",
    "sweep": r"(?i)\bsweeps?\b",
    "thread": r"(?i)\bthreads?\b",
    "customer": r"(?i)\bcustomers?\b",
    "erasure": r"(?i)\berasures?\b",
    "unknown": r"(?i)\bunknown\b",
    "failed": r"(?i)\bfailed\b",
    "connection": r"(?i)\bconnection\b",
    "degraded": r"(?i)\bdegraded\b",
    "Idle": r"\bIdle\b",
    "Active": r"\bActive\b",
    "English month": r"\b(Jan|Feb|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\b",
}
FOREIGN = {"es": ENGLISH_WORDS, "en": SPANISH_WORDS}

# Every page, as each role opens it, with the query that shows its figures (a thread, a customer): path, query.
WALK = [
    ("app_pages/memory.py", {}),
    ("app_pages/preferences.py", {}),
    ("app_pages/sweeps.py", {}),
    ("app_pages/checkpoints.py", {"thread": "cliente-C1-1"}),
    ("app_pages/checkpoints.py", {"view": "search"}),
    ("app_pages/checkpoints.py", {"view": "cost"}),
    ("app_pages/checkpoints.py", {"view": "storage"}),
    ("app_pages/degradation.py", {}),
    ("app_pages/erasure.py", {"cliente": "C2"}),
    ("app_pages/erasure_register.py", {}),
    ("app_pages/access.py", {"cliente": "C2"}),
    ("app_pages/access_register.py", {}),
]


@pytest.mark.parametrize("lang", ["es", "en"])
def test_every_page_speaks_one_language(demo_db, app_env, lang):
    """Every page on the demo data, in each language, shows no give-away word of the other one (issue 40)."""
    from apptools import foreign_words, visible_texts
    from streamlit.testing.v1 import AppTest

    app_env(demo_db.dsn, LOCAL_ROLES="manager,sre,dpo")
    found = []
    for path, query in WALK:
        at = AppTest.from_file("../dashboard.py", default_timeout=120)
        at.query_params["lang"] = lang
        for k, v in query.items():
            at.query_params[k] = v
        at.run()
        at.switch_page(path).run()
        assert not at.exception, (path, at.exception)
        texts = visible_texts(at)
        assert len(texts) > 5, (path, texts)
        found += [(path, *hit) for hit in foreign_words(texts, FOREIGN[lang])]
    assert found == [], "\n".join(map(str, found))
