"""Erasure (DPO): customer id -> dry-run preview -> confirm by typing the id -> progress -> evidence."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from agent_memory_runtime import clock
from core import roles
from core.memory.store import InvalidIdentifier
from core.privacy import erasure, erasure_register, evidence
from core.privacy import subjects as subj
from ui import fmt
from ui.attribution import decisions_of, page_coverage, show_residue, show_sources
from ui.common import call_expensive, call_now, forget_all, require_role, settings
from ui.errors import refused_message
from ui.i18n import t
from ui.safe import md, md_code
from ui.tables import table

ID_KEY = "erasure.customer"
PREVIEW_KEY = "erasure.preview_result"
ROW_PX = 35  # a dataframe row's height in pixels (the header's too)
DIALOG_KEY = "erasure.dialog_open"
PENDING_KEY = "erasure.pending"
RESULT_KEY = "erasure.result"
FAILED_KEY = "erasure.failed"
RUNNING_KEY = "erasure.running"  # set while an erasure runs: a rerun that cuts it short finds it still set
REQUEST_QUERY = "solicitud"  # ?solicitud=<request id>: the erasure this URL ran, as the register page reads it

user = require_role(roles.DPO)
operator = user.email or "local"
attribution = subj.Attribution.from_settings(settings())
if ID_KEY not in st.session_state:
    st.session_state[ID_KEY] = st.query_params.get("cliente", "")


def _close_dialog() -> None:
    st.session_state[DIALOG_KEY] = False


@st.dialog(t("erasure_confirm_title"), on_dismiss=_close_dialog)
def confirm(preview: evidence.Preview, decisions: dict) -> None:
    st.markdown(t("erasure_confirm_body", total=fmt.number(preview.total), id=md(preview.customer_id)))
    typed = st.text_input(t("erasure_confirm_input"), key="erasure.confirm_id")
    if st.button(t("erasure_confirm_button"), key="erasure.confirm", type="primary", icon=":material/delete_forever:"):
        if typed != preview.customer_id:
            st.error(t("erasure_confirm_mismatch"))
            return
        st.session_state[PENDING_KEY] = (preview.customer_id, decisions)
        st.session_state[DIALOG_KEY] = False
        st.session_state.pop(PREVIEW_KEY, None)
        st.rerun()


def run_erasure(customer_id: str, decisions: dict) -> None:
    step_text = {
        "counting": lambda p: t("erasure_step_counting"),
        "store": lambda p: t("erasure_step_store", p=p.pass_no, n=fmt.number(p.deleted)),
        "threads": lambda p: t("erasure_step_threads", p=p.pass_no, n=p.detail.get("threads", 0)),
        "logs": lambda p: t("erasure_step_logs", p=p.pass_no, n=fmt.number(p.deleted)),
        "evidence": lambda p: t("erasure_step_evidence", p=p.pass_no, n=sum(p.detail.values())),
        "done": lambda p: t("erasure_step_done"),
    }
    st.session_state[RUNNING_KEY] = customer_id
    with st.status(t("erasure_running", id=md(customer_id)), expanded=True) as status:
        try:
            # a click meanwhile makes status.write raise Streamlit's rerun: core records `interrupted`
            result = call_now(
                erasure.erase,
                customer_id,
                operator=operator,
                decisions=decisions,
                config=attribution,
                progress=lambda p: status.write(step_text[p.step](p)),
            )
        except Exception as exc:  # recorded as failed by core; shown, never hidden
            status.update(label=t("erasure_failed", error=md(exc)), state="error")
            st.session_state[FAILED_KEY] = f"{type(exc).__name__}: {exc}"
            st.session_state.pop(RUNNING_KEY, None)
            return
        status.update(
            label=t("erasure_done_label", id=md(customer_id)),
            state="complete" if result.complete else "error",
            expanded=False,
        )
    st.session_state.pop(RUNNING_KEY, None)
    forget_all()  # every store figure on the other pages may have changed
    st.session_state[RESULT_KEY] = result
    st.query_params[REQUEST_QUERY] = str(result.request_id)  # a reload finds the result in its register entry
    st.toast(t("erasure_toast", id=md(customer_id), rid=result.request_id), icon=":material/task_alt:")


def show_result(result: erasure.ErasureResult) -> None:
    if result.complete and result.exclusions:
        named = "; ".join(f"{md_code(e['thread_id'])} ({md(e['reason'])})" for e in result.exclusions)
        st.warning(t("erasure_exclusions", report=named), icon=":material/rule:")
    elif result.complete:
        st.success(t("erasure_complete", id=md(result.customer_id)), icon=":material/verified:")
    else:
        st.error(t("erasure_incomplete", id=md(result.customer_id), report=md(result.report)))
    took = fmt.duration((result.finished_at - result.requested_at).total_seconds()) if result.finished_at else "—"
    st.caption(
        t(
            "erasure_request",
            rid=result.request_id,
            operator=md(result.operator),
            passes=fmt.count("erasure_passes", result.passes),
            took=took,
        )
    )
    if result.proof is not None:  # the independent re-read behind "complete" (core.privacy.proof)
        st.caption(
            t(
                "erasure_proof_clean" if result.proof.clean else "erasure_proof_found",
                tables=fmt.number(len(result.proof.tables)),
                took=fmt.duration(result.proof.ran_ms / 1000),
            )
        )
    if result.complete:  # SQL zero is not zero bytes (core.privacy.physical): said here, settled by the sweep
        st.info(t("erasure_not_physical_yet"), icon=":material/hard_drive:")

    shown = result.store_evidence + result.server_evidence  # the seed's two, and an Agent Protocol server's tables
    st.subheader(t("erasure_evidence_title_server" if result.server_evidence else "erasure_evidence_title"))
    st.caption(t("erasure_evidence_caption"))
    first_server = result.server_evidence[0] if result.server_evidence else None
    for ev in shown:
        if ev is first_server:
            st.caption(t("erasure_evidence_server_caption", name="Aegra"))
        st.code(ev.sql, language="sql", wrap_lines=True)
        st.markdown(t("erasure_result_line", n=fmt.number(ev.result), at=fmt.moment(ev.at)))
    with st.expander(t("erasure_other_evidence")):
        for ev in result.evidence:
            if ev not in shown:
                st.code(ev.sql, language="sql", wrap_lines=True)
                st.markdown(t("erasure_result_line", n=fmt.number(ev.result), at=fmt.moment(ev.at)))

    tables = list(result.counts_before) + [k for k in result.counts_after if k not in result.counts_before]
    st.subheader(t("erasure_counts"))
    table(
        pd.DataFrame(
            {
                "table": tables,
                "before": [result.counts_before.get(k, 0) for k in tables],
                "deleted": [result.deleted.get(k, 0) for k in tables],
                "after": [result.counts_after.get(k, 0) for k in tables],
            }
        ),
        key="erasure.counts",
        config={
            "table": t("erasure_table"),
            "before": t("erasure_before"),
            "deleted": t("erasure_deleted"),
            "after": t("erasure_after"),
        },
    )
    st.download_button(
        t("erasure_download"),
        data=call_now(erasure_register.evidence_json, result.request_id),
        file_name=f"erasure-{result.request_id}-{time.strftime('%Y%m%d')}.json",
        mime="application/json",
        key="erasure.download",
        icon=":material/download:",
    )
    register_link(result.request_id)


def register_link(request_id: int) -> None:
    st.page_link(
        "app_pages/erasure_register.py",
        label=t("erasure_to_request", rid=request_id),
        icon=":material/fact_check:",
        query_params={REQUEST_QUERY: str(request_id)},
    )


def keep_preview(customer_id: str, count_common: bool = False) -> None:
    """The preview read now on the primary, kept for the next runs with the time it was read."""
    st.session_state[PREVIEW_KEY] = (
        call_expensive(evidence.preview, customer_id, attribution, count_common=count_common),
        fmt.moment(clock.now()),
    )


st.title(t("erasure_title"))
st.caption(t("erasure_caption"))
page_coverage(attribution)

cut_short = st.session_state.pop(RUNNING_KEY, None)
if cut_short:  # the previous run was cut short mid-erasure by a click: core recorded it as interrupted
    st.warning(t("erasure_interrupted", id=md(cut_short)), icon=":material/pause_circle:")
    st.page_link("app_pages/erasure_register.py", label=t("erasure_to_register"), icon=":material/fact_check:")

pending = st.session_state.pop(PENDING_KEY, None)
if pending:  # confirmed in the dialog: run once, on this run only
    st.session_state.pop(RESULT_KEY, None)
    st.session_state.pop(FAILED_KEY, None)
    run_erasure(*pending)

customer_id = st.text_input(t("erasure_customer"), key=ID_KEY)
if customer_id:
    st.query_params["cliente"] = customer_id
elif "cliente" in st.query_params:
    del st.query_params["cliente"]

if st.button(t("erasure_preview"), key="erasure.preview", icon=":material/preview:", disabled=not customer_id):
    st.session_state.pop(RESULT_KEY, None)
    st.query_params.pop(REQUEST_QUERY, None)
    st.session_state.pop(FAILED_KEY, None)
    for key in [k for k in st.session_state if str(k).startswith("erasure.residue.")]:
        del st.session_state[key]  # decisions belong to one preview
    try:
        keep_preview(customer_id)
    except InvalidIdentifier as exc:
        st.session_state.pop(PREVIEW_KEY, None)
        st.error(refused_message(customer_id, exc))

stored = st.session_state.get(PREVIEW_KEY)
preview, read_at = stored if stored else (None, None)
if preview is not None and preview.customer_id == customer_id:
    st.subheader(t("erasure_preview_title", prefix=md_code(preview.namespace_prefix)))
    st.caption(t("erasure_preview_at", at=read_at))
    left, right = st.columns(2)
    with left:
        # the tables holding rows first, the agents' and their server's before ours: forty tables' zeros, or twenty
        # of our summaries, must not push the agent server's rows out of view
        counts = sorted(preview.counts.items(), key=lambda item: (item[1] == 0, item[0].startswith("core_")))
        holding = sum(1 for _, n in counts if n)
        table(
            pd.DataFrame(counts, columns=["table", "rows"]),
            height=ROW_PX * (min(max(holding, 10), 60) + 1) + 3,  # every table holding rows in view
            key="erasure.preview_counts",
            config={"table": t("erasure_table"), "rows": t("erasure_rows")},
        )
    with right:
        if preview.namespaces:
            table(
                pd.DataFrame(preview.namespaces, columns=["namespace", "documents"]),
                key="erasure.preview_namespaces",
                config={"namespace": t("erasure_namespace"), "documents": t("erasure_documents")},
            )
    show_sources(preview.subjects)
    show_residue(preview.residue)
    if preview.residue and any(x.threads is None for x in preview.residue.terms):
        if st.button(t("erasure_count_common"), key="erasure.count_common", icon=":material/functions:"):
            keep_preview(customer_id, count_common=True)
            st.rerun()
    decisions, undecided = decisions_of(preview.residue)
    if preview.total == 0 and not preview.residue_threads:
        st.info(t("erasure_nothing", id=md(preview.customer_id)))
    if undecided:
        st.warning(fmt.count("erasure_residue_undecided", undecided))
    if st.button(
        t("erasure_start"),
        key="erasure.start",
        type="primary",
        icon=":material/delete_forever:",
        disabled=bool(undecided),
    ):
        st.session_state[DIALOG_KEY] = True
    if st.session_state.get(DIALOG_KEY):
        confirm(preview, decisions)

if FAILED_KEY in st.session_state:
    st.error(t("erasure_failed", error=md(st.session_state[FAILED_KEY])))
result = st.session_state.get(RESULT_KEY)
if result is not None:
    show_result(result)
elif st.query_params.get(REQUEST_QUERY, "").isdigit():  # a reload: the result lives in the register
    st.info(t("erasure_result_in_register", rid=int(st.query_params[REQUEST_QUERY])), icon=":material/fact_check:")
    register_link(int(st.query_params[REQUEST_QUERY]))
