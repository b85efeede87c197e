"""UI strings: Spanish by default, English on request. Keys are English.

Every visible string lives in one catalogue per language, `ui/locales/es.toml` and `ui/locales/en.toml`
(flat `key = "text"`, keys sorted), loaded once on import. Add a string by adding its key to both files;
tests/test_i18n.py checks that both have the same keys, no empty text and the same `{placeholders}`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import streamlit as st

LANGUAGES = {"es": "Español", "en": "English"}
LOCALES_DIR = Path(__file__).parent / "locales"


def load_catalogue(language: str) -> dict[str, str]:
    with open(LOCALES_DIR / f"{language}.toml", "rb") as f:
        return tomllib.load(f)


CATALOGUES: dict[str, dict[str, str]] = {language: load_catalogue(language) for language in LANGUAGES}
# Every key the UI knows (the Spanish catalogue is the reference; English must match it).
STRINGS = CATALOGUES["es"]


def lang() -> str:
    """The session's language; the URL's `?lang=` while the selector's state is not there (yet)."""
    chosen = st.session_state.get("lang") or st.query_params.get("lang")
    return chosen if chosen in LANGUAGES else "es"


def t(key: str, **kwargs) -> str:
    text = CATALOGUES.get(lang(), STRINGS).get(key) or STRINGS[key]
    return text.format(**kwargs) if kwargs else text
