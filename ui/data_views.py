"""What the pages showing a customer's data share: the purpose asked for when the configuration requires one, and
the log of each view (core.privacy.data_views), once per session and thing viewed; a failed log is a warning, the
page goes on."""
from __future__ import annotations

from typing import Iterable

import streamlit as st

from core.db import DatabaseUnavailable
from core.privacy import data_views
from ui.common import current_user, get_db, settings
from ui.i18n import t
from ui.safe import md

PURPOSE_KEY = "data_views.purpose"
LOGGED_KEY = "data_views.logged"
MAX_PURPOSE = 500


def purpose_input() -> str | None:
    """The purpose field, when the configuration asks for one (DATA_VIEWS_PURPOSE): its text (maybe empty), else
    None. One per page run; the text stays for the session."""
    if not settings().data_views_purpose:
        return None
    return st.text_input(t("views_purpose"), key=PURPOSE_KEY, max_chars=MAX_PURPOSE, help=t("views_purpose_help"),
                         placeholder=t("views_purpose_placeholder")).strip()


def allowed(purpose: str | None) -> bool:
    """May the page show a customer's data: no purpose required, or one given (else it says so)."""
    if purpose == "":
        st.info(t("views_purpose_needed"), icon=":material/edit_note:")
        return False
    return True


def record(role: str, kind: str, targets: Iterable[tuple[str, str | None]], purpose: str | None) -> None:
    """Log that the signed-in user (in `role`) viewed each (target, customer id) of `kind`, in one insert; what this
    session already logged with the same purpose is not logged again (a rerun is not another look)."""
    user = current_user()
    if user is None:
        return
    logged: set = st.session_state.setdefault(LOGGED_KEY, set())
    viewer = user.email or user.name
    fresh = [(target, customer) for target, customer in dict.fromkeys(targets)
             if (viewer, kind, target, purpose) not in logged]
    if not fresh:
        return
    try:
        data_views.log_views(get_db(), [data_views.View(viewer, role, kind, target, customer, purpose)
                                        for target, customer in fresh])
    except (data_views.DataViewLogError, DatabaseUnavailable) as exc:
        st.warning(t("views_log_failed", error=md(exc)), icon=":material/report:")
        return
    logged.update((viewer, kind, target, purpose) for target, _ in fresh)
