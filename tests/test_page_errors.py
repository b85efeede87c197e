"""A page that fails shows a translated message with an error id, never a traceback; the log keeps the traceback
under that id (ui.errors, dashboard.py). Whatever escapes the wrapper is redacted by Streamlit itself
(client.showErrorDetails in .streamlit/config.toml, copied into the image)."""

from __future__ import annotations

import logging
import re
import tomllib

import pytest
from conftest import ROOT
from streamlit import config as streamlit_config
from streamlit.testing.v1 import AppTest


@pytest.fixture(autouse=True)
def _details_as_the_suite_has_them():
    """The scripts below set the option, which is process-wide: the suite's value (conftest) is put back."""
    yield
    streamlit_config.set_option("client.showErrorDetails", "full")


def failing_page(lang: str, details: str = "none") -> None:
    import streamlit as st

    from ui.errors import shown_as_message

    st.set_option("client.showErrorDetails", details)
    st.session_state.lang = lang

    def page() -> None:
        st.title("Barridos")
        {"erasure_recheck": float("nan")}["erasure_recheck"].startswith("re-checked")  # a page's bug

    shown_as_message(page, "sweeps")
    st.caption("the rest of the app runs")


@pytest.mark.parametrize(
    ("lang", "text"),
    [
        ("es", "Esta página ha fallado. El error ha quedado registrado con el identificador"),
        ("en", "This page failed."),
    ],
)
def test_a_failing_page_shows_a_message_and_an_error_id_and_logs_the_traceback(lang, text, caplog):
    at = AppTest.from_function(failing_page, args=(lang,), default_timeout=30)
    with caplog.at_level(logging.ERROR, logger="ui.errors"):
        at.run()
    assert not at.exception  # no traceback for the user
    (error,) = at.error
    assert text in error.value and "Traceback" not in error.value and "float" not in error.value
    error_id = re.search(r"`([0-9a-f]{12})`", error.value)[1]
    (record,) = [r for r in caplog.records if r.name == "ui.errors"]
    assert error_id in record.getMessage() and "sweeps" in record.getMessage()
    assert record.exc_info[0] is AttributeError  # the traceback is in the log
    assert [c.value for c in at.caption] == ["the rest of the app runs"]


def test_streamlit_redacts_what_escapes_the_wrapper():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["client"]["showErrorDetails"] == "none"
    assert "COPY .streamlit/config.toml" in (ROOT / "Dockerfile").read_text()


def test_a_developer_sees_the_exception():
    """With Streamlit's default (conftest sets it for every test), the page's exception is Streamlit's to show: the
    page tests' `assert not at.exception` still catches a page that fails."""
    at = AppTest.from_function(failing_page, args=("es", "full"), default_timeout=30)
    at.run()
    assert [e.message for e in at.exception] == ["'float' object has no attribute 'startswith'"]
    assert not at.error
