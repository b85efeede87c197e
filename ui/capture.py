"""The change follower on screen: on the pages whose figures it keeps (Memory, Sweeps), how far behind it is, and
"unknown" when no follower runs, with the time its figures are as of: never a stale figure shown as current."""

from __future__ import annotations

import streamlit as st

from core.capture.status import CaptureStatus, capture_status
from ui import fmt
from ui.common import call_or_unknown
from ui.i18n import t

STALE_S = 5.0  # beyond this lag the figures are said to be "as of" a time, not current


def freshness_note() -> CaptureStatus | None:
    """A caption with the lag when it is small, a note "as of" when it is not, a warning when no follower runs."""
    s: CaptureStatus | None = call_or_unknown(capture_status)
    if s is None:
        return None
    at = fmt.clock(s.caught_up_at) if s.caught_up_at is not None else None
    if s.slot and s.wal_status == "lost":
        st.warning(t("capture_lost", at=at or t("capture_never_short")), icon=":material/sync_problem:")
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
    return s
