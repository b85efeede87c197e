"""The sidebar's database status: the probe every session shares (ui.common.database_probe), with its time.

Drawn before the page, it must never contradict a newer read of the same run (issue 54, finding 8): when it shows a
failed probe and the page's read is then answered (ui.common.database_answered), it probes again, once, and is drawn
again at once in a full run; in a rerun of the page's own fragment (which cannot draw in the sidebar), its fragment
looks again within FOLLOW_S while it does not say "reachable" (taking no probe unless a read answered after it)."""

from __future__ import annotations

import streamlit as st

from ui import fmt
from ui.common import PROBE_INTERVAL_S, STATUS_SHOWN, database_probe, get_db
from ui.i18n import t
from ui.safe import md

FOLLOW_S = 2  # seconds between two looks of the status while it does not say "reachable"


def sidebar_status() -> None:
    """The status, in its fragment: redrawn every PROBE_INTERVAL_S, or FOLLOW_S while the last one shown was not ok."""
    shown = st.session_state.get(STATUS_SHOWN)
    every = PROBE_INTERVAL_S if shown is None or shown["ok"] else FOLLOW_S
    st.fragment(run_every=every)(_status)()


def _status() -> None:
    slots = (st.empty(), st.empty(), st.empty())  # each line replaced in place when drawn again
    _draw(slots)


def _draw(slots: tuple) -> None:
    db = get_db()
    shared = database_probe()  # one probe per process per interval, for every session
    probe = shared.value
    target, state, checked = slots
    target.caption(f"**{t('db')}:** {t('embedded') if db.embedded else db.target}")
    if probe is None:
        state.caption(":grey[●] " + t("db_unknown", error=md(shared.error)))
    elif probe.ok:
        state.caption(":green[●] " + t("db_ok", ms=probe.latency_ms, version=probe.server_version))
    else:
        state.caption(":red[●] " + t("db_down", error=probe.error))
    checked.caption(t("db_checked", at=fmt.clock(shared.at)))
    ok = probe is not None and probe.ok
    st.session_state[STATUS_SHOWN] = {"ok": ok, "at": shared.at, "redraw": lambda: _draw(slots)}
