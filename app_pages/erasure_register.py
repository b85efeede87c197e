"""Erasure register (DPO): every request, its status, time to zero, re-checks, and a manual re-check."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core import roles
from core.operations.sweep import RECHECK_TRIGGERS
from core.privacy import came_back, erasure, erasure_register, follow_up, physical
from ui import fmt
from ui.common import call_now, forget_all, require_role
from ui.i18n import t
from ui.registers import verify_button
from ui.safe import md
from ui.tables import table

PICK_KEY = "erasure_register.request"
NOTICE_KEY = "erasure_register.notice"
NEXT_PICK_KEY = "erasure_register.next_pick"
# what starts a re-check (core.privacy.erasure_register): the button, a sweep (core.operations.sweep.recheck_trigger)
TRIGGERS = ("manual", *RECHECK_TRIGGERS)
QUERY = "solicitud"  # ?solicitud=<request id> opens the page on that request (the Erasure page links to it)

user = require_role(roles.DPO)
operator = user.email or "local"


def _dirty_text(result: erasure_register.RecheckResult) -> str:
    return ", ".join(f"{md(table)}={n}" for table, n in result.counts.items() if n)


st.title(t("erasure_register_title"))
st.caption(t("erasure_register_caption"))
verify_button("erasure", key="erasure_register.verify")

# The outcome of an action, shown after its rerun next to what it was about: ("all" | request id, kind, text)
notice = st.session_state.pop(NOTICE_KEY, None)


def show_notice(about: object) -> None:
    if notice and notice[0] == about:
        (st.success if notice[1] == "ok" else st.error)(notice[2])


if st.button(t("erasure_recheck_all"), key="erasure_register.recheck_all", icon=":material/published_with_changes:"):
    results = call_now(erasure_register.recheck_all, trigger="manual", operator=operator)
    dirty = [r for r in results if not r.clean]
    st.session_state[NOTICE_KEY] = (
        "all",
        "ok" if not dirty else "error",
        fmt.count("erasure_rechecked_all", len(results), dirty=fmt.number(len(dirty))),
    )
    st.rerun()
show_notice("all")

requests = call_now(erasure_register.register)
if requests.empty:
    st.info(t("erasure_register_empty"))
    st.stop()

data_back = requests[requests["outcome"] == erasure_register.DATA_BACK]
c1, c2, c3, c4 = st.columns(4)
c1.metric(t("erasure_requests"), len(requests))
c2.metric(t("erasure_completed"), int((requests["outcome"] == "complete").sum()))
c3.metric(t("erasure_same_day"), f"{int(requests['same_day'].sum())} / {len(requests)}")
c4.metric(t("erasure_came_back"), len(data_back))
if len(data_back):  # first in the table, never shown as plain complete (a warning: st.error is the page failing)
    st.warning(
        fmt.count("erasure_data_back_banner", len(data_back), ids=", ".join(f"#{i}" for i in data_back["id"])),
        icon=":material/restore_page:",
    )

table(  # the status column shows the outcome: a request whose data came back says so
    requests.assign(status=requests["outcome"].map(lambda o: t(f"erasure_outcome_{o}"))).drop(
        columns=["report", "outcome"]
    ),
    key="erasure_register.table",
    config={
        "id": "#",
        "customer_id": t("erasure_col_customer"),
        "operator": t("erasure_col_operator"),
        "status": {"label": t("erasure_col_status"), "width": 280},
        "requested_at": t("erasure_col_requested"),
        "finished_at": t("erasure_col_finished"),
        "seconds_to_zero": t("erasure_col_seconds"),
        "same_day": t("erasure_same_day"),
        "passes": t("erasure_col_passes"),
        "counts_before": t("erasure_col_before"),
        "deleted": t("erasure_col_deleted"),
        "counts_after": t("erasure_col_after"),
        "last_recheck_at": t("erasure_col_last_recheck"),
        "last_recheck_clean": t("erasure_col_last_clean"),
        "rechecks": t("erasure_col_rechecks"),
        "rechecks_dirty": t("erasure_col_dirty"),
        "came_back": t("erasure_came_back"),
        "exclusions": t("erasure_col_exclusions"),
        "resumed_by": t("erasure_col_resumed_by"),
        "resumable": t("erasure_col_resumable"),
    },
)

labels = {
    int(r.id): t("erasure_pick_label", rid=int(r.id), id=r.customer_id, at=fmt.moment(r.requested_at))
    for r in requests.itertuples()
}
if st.session_state.get(NEXT_PICK_KEY) in labels:
    st.session_state[PICK_KEY] = st.session_state.pop(NEXT_PICK_KEY)
if PICK_KEY not in st.session_state and st.query_params.get(QUERY, "").isdigit():
    st.session_state[PICK_KEY] = int(st.query_params[QUERY])
if st.session_state.get(PICK_KEY) not in labels:
    st.session_state[PICK_KEY] = next(iter(labels))
request_id = st.selectbox(t("erasure_pick"), list(labels), format_func=labels.get, key=PICK_KEY)
st.query_params[QUERY] = str(request_id)  # the URL names the request shown
row = requests.set_index("id").loc[request_id]
if row["report"]:
    st.warning(md(row["report"]))

left, right = st.columns([1, 1])
with left:
    if st.button(
        t("erasure_recheck_button"), key="erasure_register.recheck", type="primary", icon=":material/fact_check:"
    ):
        result = call_now(erasure_register.recheck, request_id, trigger="manual", operator=operator)
        if result.clean:
            st.session_state[NOTICE_KEY] = (
                request_id,
                "ok",
                t("erasure_recheck_clean", at=fmt.moment(result.checked_at)),
            )
        else:
            st.session_state[NOTICE_KEY] = (
                request_id,
                "error",
                t("erasure_recheck_dirty", id=md(result.customer_id), counts=_dirty_text(result)),
            )
        st.rerun()
with right:
    st.download_button(
        t("erasure_download"),
        data=call_now(erasure_register.evidence_json, request_id),
        file_name=f"erasure-{request_id}.json",
        mime="application/json",
        key="erasure_register.download",
        icon=":material/download:",
    )
show_notice(request_id)
if row["resumable"]:
    st.caption(t("erasure_resume_help"))
    if st.button(t("erasure_resume_button"), key="erasure_register.resume", icon=":material/play_circle:"):
        with st.spinner(t("erasure_running", id=md(row["customer_id"]))):
            resumed = call_now(follow_up.resume, request_id, operator=operator)
        forget_all()
        st.session_state[NOTICE_KEY] = (
            resumed.request_id,
            "ok" if resumed.complete else "error",
            t("erasure_resumed", rid=resumed.request_id, status=md(resumed.status)),
        )
        st.session_state[NEXT_PICK_KEY] = resumed.request_id  # picked before the selectbox exists, next run
        st.rerun()
if row["outcome"] == erasure_register.DATA_BACK:
    st.warning(t("erasure_again_help", rid=request_id), icon=":material/restore_page:")
    back = call_now(came_back.came_back, request_id)  # what exists again, read now: which thread, when, which agent
    st.markdown(fmt.count("erasure_came_back_what", len(back)))
    table(
        back.assign(
            kind=back["kind"].map(lambda k: t(f"erasure_came_back_{k}")), agent=back["agent"].fillna(t("unknown_agent"))
        ),
        key="erasure_register.came_back",
        config={
            "kind": t("erasure_came_back_col_kind"),
            "where": t("erasure_came_back_col_where"),
            "first_write": t("erasure_came_back_col_first"),
            "last_write": t("erasure_came_back_col_last"),
            "agent": t("erasure_came_back_col_agent"),
        },
    )
    if st.button(
        t("erasure_again_button"), key="erasure_register.erase_again", type="primary", icon=":material/delete_forever:"
    ):
        try:
            with st.spinner(t("erasure_again_running", rid=request_id)):
                again = call_now(follow_up.erase_again, request_id, operator=operator)
        except erasure.ErasureError as exc:
            st.session_state[NOTICE_KEY] = (request_id, "error", md(exc))
        else:
            forget_all()
            st.session_state[NOTICE_KEY] = (
                again.request_id,
                "ok" if again.complete else "error",
                t(
                    "erasure_again_done",
                    old=request_id,
                    rid=again.request_id,
                    status=t(f"erasure_outcome_{again.status}"),
                ),
            )
            st.session_state[NEXT_PICK_KEY] = again.request_id
        st.rerun()
if row["came_back"] or row["status"] != "complete":
    st.page_link(
        "app_pages/erasure.py",
        label=t("erasure_page"),
        icon=":material/delete_forever:",
        query_params={"cliente": row["customer_id"]},
    )

st.subheader(t("erasure_physical_title"))
st.caption(t("erasure_physical_caption"))
settled = call_now(physical.record, request_id)
if settled is None:
    st.warning(t("erasure_physical_none"), icon=":material/hourglass_top:")
else:
    st.markdown(t("erasure_physical_sql", at=fmt.moment(settled["t_sql_zero"])) if settled["t_sql_zero"] else "")
    measured_at = fmt.moment(settled["settled_at"])
    if settled["files_status"] == physical.OVERWRITTEN:
        st.success(t("erasure_physical_overwritten", at=fmt.moment(settled["t_files_overwritten"])))
    elif settled["files_status"] == physical.IN_FREE_SPACE:
        st.warning(t("erasure_physical_free", at=measured_at), icon=":material/hard_drive:")
    else:
        st.warning(t("erasure_physical_not_measured", at=measured_at), icon=":material/help:")
    if settled["t_wal_backup_horizon"]:
        st.info(t("erasure_physical_horizon", at=fmt.moment(settled["t_wal_backup_horizon"])))
    else:
        st.warning(t("erasure_physical_horizon_unknown"), icon=":material/history:")
    with st.expander(t("erasure_physical_notes")):  # the evidence's own record, in the language it is kept in
        for note in (settled["files_note"], settled["horizon_note"]):
            if note:
                st.code(note, language=None, wrap_lines=True)
    found = settled["files"].get("tables", {})
    steps = pd.DataFrame(
        [
            {
                "table_name": name,
                "vacuum_done": bool(step.get("done")),
                "vacuumed_at": pd.to_datetime(step.get("finished_at"), utc=True),
                "dead_not_removable": (step.get("report") or {}).get("dead_not_removable"),
                "last_vacuum": pd.to_datetime((step.get("stats") or {}).get("last_vacuum"), utc=True),
                "found": ", ".join(
                    f"{part}: {'/'.join(refs)}" for part, refs in found.get(name, {}).get("parts", {}).items()
                ),
            }
            for name, step in settled["steps"].get("tables", {}).items()
        ]
    )
    if not steps.empty:
        table(
            steps,
            key="erasure_register.physical",
            columns=["table_name", "vacuum_done", "vacuumed_at", "dead_not_removable", "last_vacuum", "found"],
        )

st.subheader(t("erasure_rechecks_title"))
checks = call_now(erasure_register.rechecks, request_id)
if checks.empty:
    st.caption(t("erasure_no_rechecks"))
else:
    checks["found"] = checks["counts"].map(lambda c: sum(c.values()))
    checks["counts"] = checks["counts"].map(
        lambda c: ", ".join(f"{k}: {fmt.number(v)}" for k, v in c.items() if v) or t("erasure_recheck_nothing")
    )
    checks["trigger"] = checks["trigger"].map(lambda x: t(f"erasure_trigger_{x}") if x in TRIGGERS else x)
    table(
        checks,
        key="erasure_register.rechecks",
        columns=["id", "checked_at", "trigger", "operator", "clean", "found", "counts"],
    )
