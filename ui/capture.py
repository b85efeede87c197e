"""The change follower on screen: on the pages whose figures it keeps (Memory, Sweeps), how far behind it is, and
"unknown" when no follower runs, with the time its figures are as of: never a stale figure shown as current."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.capture import changes
from core.capture.status import CaptureStatus, capture_status
from ui import fmt
from ui.common import call_or_unknown
from ui.i18n import t
from ui.tables import human_bytes, table

STALE_S = 5.0  # beyond this lag the figures are said to be "as of" a time, not current


def freshness_note() -> CaptureStatus | None:
    """A caption with the lag when it is small, a note "as of" when it is not, a warning when no follower runs."""
    s: CaptureStatus | None = call_or_unknown(capture_status)
    if s is None:
        return None
    at = fmt.clock(s.caught_up_at) if s.caught_up_at is not None else None
    if s.slot and s.wal_status == "lost":
        st.warning(t("capture_lost", at=at or t("capture_never_short")), icon=":material/sync_problem:")
    elif not s.slot and not s.running and s.recounted_at is not None:  # the sweep's recount (core.capture.recount)
        st.info(t("capture_recount_mode", at=fmt.clock(s.recounted_at)), icon=":material/schedule:")
    elif not s.running or s.caught_up_at is None:
        key = "capture_not_running" if at else "capture_never"
        st.warning(t(key, at=at), icon=":material/sync_problem:")
    elif (s.lag_seconds or 0.0) > STALE_S:
        st.info(
            t("capture_as_of", at=at, seconds=fmt.number(s.lag_seconds or 0.0, 1), bytes=fmt.number(s.lag_bytes or 0)),
            icon=":material/schedule:",
        )
    else:
        st.caption(t("capture_lag", seconds=fmt.number(s.lag_seconds or 0.0, 1), bytes=fmt.number(s.lag_bytes or 0)))
    if s.dead_letters:  # rows it could not apply: the figures they touch are unknown until a recount
        st.warning(t("capture_dead_letters_note", n=fmt.number(s.dead_letters)), icon=":material/report:")
    return s


# The follower names the figures a dead letter leaves unknown in its own words (core.capture.changes); shown translated.
FIGURES = {
    changes.PREFIX_DOCUMENTS: "capture_figure_prefix_documents",
    changes.ROOT_FIGURES: "capture_figure_root",
    changes.EXPIRY_DAYS: "capture_figure_expiry_days",
    changes.HOLDERS: "capture_figure_holders",
    changes.CHECKPOINT_SUBJECTS: "capture_figure_checkpoint_subjects",
}


def _figures(text: str | None) -> str | None:
    """'documents per prefix: clientes.D1; ...' in the UI's language ('*': every one)."""
    if not text:
        return text
    out = []
    for part in text.split("; "):
        label, _, subject = part.partition(": ")
        name = t(FIGURES[label]) if label in FIGURES else label
        out.append(f"{name}: {t('capture_figure_all') if subject == '*' else subject}")
    return "; ".join(out)


def dead_letters_panel(s: CaptureStatus | None, letters: pd.DataFrame | None) -> None:
    """Degradation: the rows the follower could not apply (issue 51), each with its position, table, row, error and
    the figures it leaves unknown until a recount; "unknown" when they were not read now."""
    st.subheader(t("capture_dead_letters_title"))
    st.caption(t("capture_dead_letters_caption"))
    if s is None or letters is None:
        st.info(t("capture_unknown"))
    elif letters.empty:
        st.success(t("capture_dead_letters_none"), icon=":material/check_circle:")
    else:
        st.error(t("capture_dead_letters_open", n=fmt.number(s.dead_letters)), icon=":material/report:")
        table(
            letters.assign(unknown=letters["unknown"].map(_figures)),
            key="degradation.capture_dead_letters",
            columns=["recorded_at", "table_name", "row_key", "unknown", "error", "lsn", "xid"],
        )


def slot_panel(s: CaptureStatus | None) -> None:
    """Degradation: the follower and its replication slot (issue 37 item 4): running, lag, the WAL the slot keeps and
    how much more it may keep before PostgreSQL invalidates it; every figure "unknown" when it was not read now."""
    unknown = t("capture_unknown")
    with st.container(border=True):
        st.markdown(f"**{t('capture_panel_title')}**")
        c1, c2, c3, c4 = st.columns(4)
        if s is None:
            state = unknown
        elif s.slot and s.wal_status == "lost":
            state = t("capture_state_lost")
        elif not s.slot:
            state = t("capture_state_no_slot")
        else:
            state = t("capture_state_running" if s.running else "capture_state_stopped")
        c1.metric(t("capture_panel_state"), state)
        lag = None if s is None or not s.known else s.lag_seconds
        c2.metric(t("capture_panel_lag"), unknown if lag is None else f"{fmt.number(lag, 1)} s")
        retained = None if s is None else s.retained_bytes
        c3.metric(t("capture_panel_retained"), unknown if retained is None else human_bytes(retained))
        if s is None or s.retained_bytes is None:
            safe = unknown
        else:
            safe = t("capture_no_limit") if s.safe_wal_size is None else human_bytes(s.safe_wal_size)
        c4.metric(t("capture_panel_safe"), safe, help=t("capture_panel_safe_help"))
        if s is not None and not s.slot and s.recounted_at is not None:
            st.caption(t("capture_recounted_at", at=fmt.clock(s.recounted_at)))
        if s is not None and s.slot and not s.running:
            st.warning(t("capture_slot_unconsumed"), icon=":material/sync_problem:")
        elif s is not None and s.retained_bytes is not None and s.safe_wal_size is None:
            st.warning(t("capture_slot_unbounded"), icon=":material/warning:")
