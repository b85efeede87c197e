"""The read replica on screen: its lag in the sidebar, and on every page a note when the data is
older than the configured bound ("as of <time>") or when reads fell back to the primary."""

from __future__ import annotations

import streamlit as st

from core.db import one
from core.read_replica import ReplicaStatus
from ui import fmt
from ui.common import read_router, settings
from ui.i18n import t
from ui.safe import md

STATUS_TTL = 5  # seconds one lag reading is reused by the page note


@st.cache_data(ttl=STATUS_TTL, show_spinner=False)
def _status(key: tuple[str, str]) -> ReplicaStatus:
    return read_router().status()


def status(*, fresh: bool = False) -> ReplicaStatus:
    router = read_router()
    key = (router.primary.dsn, router.replica.dsn if router.replica else "")
    if fresh:
        _status.clear(key)
    return _status(key)


def sidebar_status() -> None:
    """The replica's lag in bytes and seconds (nothing when no replica is configured)."""
    router = read_router()
    if not router.configured:
        return
    s = status(fresh=True)
    st.caption(f"**{t('replica')}:** {s.target}")
    if not s.up:
        st.caption(t("replica_down"))
    elif s.error:
        st.caption(t("replica_not_standby"))
    else:
        seconds = t("replica_seconds", s=s.lag_seconds) if s.lag_seconds is not None else t("replica_seconds_unknown")
        key = "replica_lag_stale" if s.stale(settings().replica_max_lag_s) else "replica_lag"
        st.caption(t(key, bytes=f"{s.lag_bytes:,}", seconds=seconds))


def page_note() -> None:
    """Above every page: "as of <time>" when the replica lags beyond REPLICA_MAX_LAG_S, or the fallback note."""
    router = read_router()
    if not router.configured:
        return
    s = status()
    bound = settings().replica_max_lag_s
    if not s.up or router.fallback_error:
        st.warning(t("replica_fallback", error=md(s.error or router.fallback_error)), icon=":material/sync_problem:")
    elif s.stale(bound):
        st.info(
            t("replica_as_of", at=fmt.clock(one(s.replayed_at)), seconds=s.lag_seconds, bound=bound),
            icon=":material/schedule:",
        )
