"""An Agent Protocol server's own tables as the SRE reads them (core.agent_server.aegra): which server the Degradation
page names, and the Checkpoints page's view of its threads and runs (server status, runs, stuck runs, and threads
whose server row and checkpoints disagree)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.agent_server import aegra
from core.db import DatabaseUnavailable
from ui import fmt
from ui.common import CACHE_TTL, get_db, read, secrets
from ui.i18n import t
from ui.safe import md, md_code
from ui.tables import table

PREFIX = "checkpoints.server"
THREAD_STATUSES = ("idle", "busy", "interrupted", "error")  # Aegra's thread statuses (its ThreadStatus)
STATUS_COLOURS = {
    "error": "#f8d7da",
    "interrupted": "#fff3cd",
    "busy": "#d1ecf1",
    "running": "#d1ecf1",
    "pending": "#e2e3e5",
    "success": "#d4edda",
    "timeout": "#f8d7da",
}
# what the SRE looks at first: the server's status, whether it agrees with the checkpoints, the runs
THREAD_COLUMNS = [
    "thread_id",
    "server_status",
    "agreement",
    "stuck_runs",
    "last_run_status",
    "runs",
    "checkpoints",
    "assistant",
    "updated_at",
    "created_at",
    "graph_id",
    "user_id",
]
AGREEMENT_COLOURS = {"both": "#d4edda", "server_only": "#f8d7da", "checkpoints_only": "#f8d7da"}


@st.cache_data(ttl=CACHE_TTL, max_entries=8, show_spinner=False)
def _detected(dsn: str) -> aegra.AgentServer | None:
    return aegra.detect(get_db())


def server_line() -> None:
    """The line naming the agent server this database serves, that there is none, or, when the database does not
    answer now, nothing (never "none" on a read that did not happen: the page says the database is down)."""
    try:
        server = _detected(get_db().dsn)
    except DatabaseUnavailable:
        return
    if server is None:
        st.caption(t("agent_server_none"))
        return
    release = (
        t("agent_server_release", release=md(server.release)) if server.release else t("agent_server_release_unknown")
    )
    st.caption(t("agent_server_named", name=md(server.name), revision=md_code(server.revision), release=release))


def _threshold() -> float | None:
    try:
        return aegra.stuck_threshold_s(secrets())
    except ValueError as exc:  # a bad setting is said, and nothing is flagged on a guess
        st.error(md(exc))
        return None


def server_view() -> None:
    """The Checkpoints page's view of the agent server: its threads (searchable, filterable), one thread's runs, and
    the runs stuck past the threshold."""
    st.subheader(t("agent_server_title"))
    server = read(aegra.detect)
    if server is None:
        st.info(t("agent_server_none"), icon=":material/dns:")
        return
    server_line()
    stuck_s = _threshold()
    if stuck_s is None:
        return
    stuck = read(aegra.stuck_runs, stuck_s=stuck_s)
    if stuck.empty:
        st.success(t("agent_server_no_stuck", threshold=fmt.duration(stuck_s)), icon=":material/check_circle:")
    else:
        st.error(
            t("agent_server_stuck", n=len(stuck), threshold=fmt.duration(stuck_s)),
            icon=":material/running_with_errors:",
        )
        table(stuck.assign(idle_s=stuck["idle_s"].round()), f"{PREFIX}.stuck", colours={"status": STATUS_COLOURS})
    cols = st.columns([3, 2, 2, 1])
    search = cols[0].text_input(t("agent_server_search"), key=f"{PREFIX}.search", max_chars=aegra.MAX_SEARCH)
    statuses = cols[1].multiselect(
        t("agent_server_status"), THREAD_STATUSES, key=f"{PREFIX}.statuses", placeholder=t("agent_server_status_any")
    )
    agreement = cols[2].selectbox(
        t("agent_server_agreement"),
        ("", *aegra.AGREEMENTS),
        key=f"{PREFIX}.agreement",
        format_func=lambda a: t(f"agent_server_agreement_{a or 'any'}"),
    )
    stuck_only = cols[3].checkbox(t("agent_server_stuck_only"), key=f"{PREFIX}.stuck_only")
    try:
        threads = read(
            aegra.server_threads,
            stuck_s=stuck_s,
            search=search,
            statuses=tuple(statuses),
            agreement=agreement,
            stuck_only=stuck_only,
        )
    except ValueError as exc:
        st.error(md(exc))
        return
    disagree = threads[threads["agreement"] != "both"]
    if not disagree.empty:
        st.warning(t("agent_server_disagree", n=len(disagree)), icon=":material/sync_problem:")
    st.caption(t("agent_server_threads_caption", n=len(threads)))
    table(
        threads.assign(agreement=threads["agreement"].map(lambda a: t(f"agent_server_agreement_{a}"))),
        f"{PREFIX}.threads",
        columns=THREAD_COLUMNS,
        colours={
            "server_status": STATUS_COLOURS,
            "last_run_status": STATUS_COLOURS,
            "agreement": {t(f"agent_server_agreement_{k}"): v for k, v in AGREEMENT_COLOURS.items()},
        },
        on_select="rerun",
        selection_mode="single-row",
    )
    picked = st.session_state[f"{PREFIX}.threads"].selection.rows
    if not picked:
        st.caption(t("agent_server_pick"))
        return
    thread_id = str(threads.iloc[picked[0]]["thread_id"])
    st.markdown(t("agent_server_runs_of", thread=md_code(thread_id)))
    runs: pd.DataFrame = read(aegra.thread_runs, thread_id, stuck_s=stuck_s)
    table(runs, f"{PREFIX}.runs", colours={"status": STATUS_COLOURS})
