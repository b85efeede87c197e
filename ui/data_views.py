"""What the pages showing a customer's data share: the purpose asked for when the configuration requires one, and
the log of each view (core.privacy.data_views), once per session and thing viewed. Logging never waits on the
database (a background writer does); a view the log could not even queue is a warning, and the page goes on."""

from __future__ import annotations

from collections.abc import Iterable

import streamlit as st

from core.privacy import data_views
from ui import fmt
from ui.common import current_user, get_db, settings
from ui.i18n import t

PURPOSE_KEY = "data_views.purpose"
LOGGED_KEY = "data_views.logged"
LOST_KEY = "data_views.lost"
MAX_PURPOSE = 500


def purpose_input() -> str | None:
    """The purpose field, when the configuration asks for one (DATA_VIEWS_PURPOSE): its text (maybe empty), else
    None. One per page run; the text stays for the session."""
    if not settings().data_views_purpose:
        return None
    return st.text_input(
        t("views_purpose"),
        key=PURPOSE_KEY,
        max_chars=MAX_PURPOSE,
        help=t("views_purpose_help"),
        placeholder=t("views_purpose_placeholder"),
    ).strip()


def allowed(purpose: str | None) -> bool:
    """May the page show a customer's data: no purpose required, or one given (else it says so)."""
    if purpose == "":
        st.info(t("views_purpose_needed"), icon=":material/edit_note:")
        return False
    return True


def record(role: str, kind: str, targets: Iterable[tuple[str, str | None]], purpose: str | None) -> None:
    """Log that the signed-in user (in `role`) viewed each (target, customer id) of `kind` (queued, written in the
    background); what this session already logged with the same purpose is not logged again (a rerun is not another
    look). A view the log could not queue (lost, counted by core) is said on every run that shows it."""
    user = current_user()
    if user is None:
        return
    logged: set = st.session_state.setdefault(LOGGED_KEY, set())
    lost: set = st.session_state.setdefault(LOST_KEY, set())
    viewer = user.email or user.name
    shown = [(viewer, kind, target, purpose) for target, _ in dict.fromkeys(targets)]
    fresh = [
        (target, customer)
        for target, customer in dict.fromkeys(targets)
        if (viewer, kind, target, purpose) not in logged
    ]
    if fresh:
        dropped = data_views.record(
            get_db(), [data_views.View(viewer, role, kind, target, customer, purpose) for target, customer in fresh]
        )
        logged.update((viewer, kind, target, purpose) for target, _ in fresh)
        lost.update((viewer, kind, target, purpose) for target, _ in fresh[len(fresh) - dropped :])
    if n := sum(1 for key in shown if key in lost):
        st.warning(fmt.count("views_log_failed", n), icon=":material/report:")
