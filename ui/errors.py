"""A page that fails shows its user a message and an error id; the log keeps the traceback under that id.

Streamlit shows an uncaught exception with its traceback (file paths, values) by default; .streamlit/config.toml sets
`client.showErrorDetails = "none"` for anything that escapes this wrapper (a fragment's own rerun, the entrypoint)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

import streamlit as st

from core.ids import InvalidIdentifier
from ui import fmt
from ui.i18n import t
from ui.safe import md_code

log = logging.getLogger(__name__)


def shown_as_message(run: Callable[[], None], page: str) -> None:
    """`run()` (a page); an exception it raises is logged with a new error id and shown as a translated message
    naming that id. Streamlit's st.stop / st.rerun / st.switch_page are not exceptions (BaseException): they pass.
    With `client.showErrorDetails = "full"` (Streamlit's default: a developer's machine, the tests) the exception
    is Streamlit's to show, as it would be without this wrapper."""
    try:
        run()
    except Exception:
        if str(st.get_option("client.showErrorDetails")).lower() in ("full", "true"):
            raise
        error_id = uuid.uuid4().hex[:12]
        log.exception("page %s failed: error id %s", page, error_id)
        st.error(t("page_failed", id=error_id), icon=":material/error:")


SHOWN_CHARS = 60  # how much of a refused value a message repeats


def refused_message(raw: str, exc: InvalidIdentifier, key: str = "invalid_id_refused") -> str:
    """A page's message for an id or a search it refused: what was typed (its start, as inert code) and why, in the
    reader's language."""
    shown = raw if len(raw) <= SHOWN_CHARS else raw[:SHOWN_CHARS] + "…"
    return t(key, value=md_code(shown), error=invalid_id(exc))


def invalid_id(exc: InvalidIdentifier) -> str:
    """Why an id or a search was refused, in the page's language (`is empty`, `contains a NUL character`, ...)."""
    return t(f"invalid_id_{exc.reason}", **{name: fmt.number(value) for name, value in exc.detail.items()})
