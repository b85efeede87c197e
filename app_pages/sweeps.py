"""Sweeps (SRE): the sweep job's runs, what is expired now, what will expire, the TTL policy in
force, and a manual "sweep now". Layout only: every figure comes from core.sweep."""
from __future__ import annotations

import plotly.express as px
import streamlit as st

from core import roles
from core.memory import reads
from core.operations import sweep, sweep_reads
from ui import common
from ui.common import ROOT_COLORS, get_db, read, require_role
from ui.tables import table
from ui.i18n import t
from ui.safe import md, plot_frame


RUNS_LIMIT = 200
DIALOG_KEY = "sweeps.dialog"
FLASH_KEY = "sweeps.flash"
MEMORY_TOP_N = 20  # the Memory page's top prefixes, refreshed after a sweep
# One colour per namespace root on every chart of the page.

user = require_role(roles.SRE)

if FLASH_KEY in st.session_state:
    icon, message = st.session_state.pop(FLASH_KEY)
    st.toast(message, icon=icon)

st.title(t("sweeps_title"))
st.caption(t("sweeps_caption"))

expired = read(sweep_reads.expired_by_root)
runs = read(sweep_reads.sweep_runs, RUNS_LIMIT)

st.subheader(t("sweeps_state_now"))
cols = st.columns(len(expired) + 1)
for col, row in zip(cols, expired.itertuples()):
    col.metric(t("sweeps_expired_metric", root=md(row.root)), f"{row.expired:,}")
last = runs.iloc[0] if not runs.empty else None
cols[-1].metric(t("sweeps_last_run"), t("sweeps_never") if last is None else f"{last.started_at:%d/%m %H:%M}",
                None if last is None else md(f"{last.status} · {last.trigger}"), delta_color="off",
                delta_arrow="off")


def _forget_affected() -> None:
    """Drop the cached reads a sweep changes: this page's and the Memory page's store figures."""
    for fn, args in [(sweep_reads.expired_by_root, ()), (sweep_reads.sweep_runs, (RUNS_LIMIT,)),
                     (sweep_reads.deleted_per_run, (RUNS_LIMIT,)), (sweep_reads.expiration_forecast, ()),
                     (reads.memory_totals, ()), (reads.documents_by_root, ()), (reads.oversized_customers, ()),
                     (reads.top_prefixes, (MEMORY_TOP_N,))]:
        common.forget(fn, *args)


def _close_dialog() -> None:
    st.session_state.pop(DIALOG_KEY, None)


@st.dialog(t("sweeps_dialog_title"), on_dismiss=_close_dialog)
def sweep_dialog() -> None:
    st.write(t("sweeps_dialog_text", n=int(expired["expired"].sum())))
    try:
        default_days = sweep.default_retention_days()
    except sweep.SweepInputError as exc:  # a bad SWEEP_RETENTION_DAYS: say so, offer the built-in default
        st.warning(md(exc))
        default_days = sweep.DEFAULT_RETENTION_DAYS
    days = st.number_input(t("sweeps_retention_days"), min_value=1, max_value=3650,
                           value=default_days, step=1, key="sweeps.days")
    dry_run = st.checkbox(t("sweeps_dry_run"), key="sweeps.dry_run")
    confirmed = st.checkbox(t("sweeps_confirm"), key="sweeps.confirm")
    if not st.button(t("sweeps_run"), key="sweeps.run", type="primary", disabled=not (confirmed or dry_run)):
        return
    with st.status(t("sweeps_running"), expanded=True) as status:
        bar = st.progress(0.0)

        def on_step(stage: str, fraction: float, detail: str) -> None:
            bar.progress(min(max(fraction, 0.0), 1.0))
            st.write(t(f"sweeps_step_{stage}", detail=md(detail)))

        result = sweep.run_sweep(get_db(), trigger="manual", retention_days=int(days), dry_run=dry_run,
                                 operator=user.email or user.name, on_step=on_step)
        status.update(state="error" if result.status == "error" else "complete")
    _forget_affected()
    if result.locked:
        flash = (":material/lock:", t("sweeps_locked"))
    elif result.status == "error":
        flash = (":material/error:", t("sweeps_failed", id=result.run_id, error=md(result.error)))
    elif dry_run:
        flash = (":material/visibility:", t("sweeps_done_dry", id=result.run_id, docs=result.documents_deleted,
                                            threads=len(result.threads)))
    else:
        flash = (":material/cleaning_services:", t("sweeps_done", id=result.run_id, docs=result.documents_deleted,
                                                   vectors=result.vectors_deleted, threads=result.threads_deleted))
    st.session_state[FLASH_KEY] = flash
    st.session_state.pop(DIALOG_KEY, None)
    st.rerun()


if st.button(t("sweeps_now"), key="sweeps.now", icon=":material/cleaning_services:", type="primary"):
    st.session_state[DIALOG_KEY] = True
if st.session_state.get(DIALOG_KEY):
    # Stays open across full reruns until the sweep ran or the user dismissed it.
    sweep_dialog()

left, right = st.columns(2)
with left:
    st.subheader(t("sweeps_runs_chart"))
    per_run = read(sweep_reads.deleted_per_run, RUNS_LIMIT)
    if per_run.empty:
        st.info(t("sweeps_no_runs"))
    else:
        fig = px.bar(plot_frame(per_run), x="run", y="documents", color="root", hover_data=["started_at", "trigger"],
                     color_discrete_map=ROOT_COLORS,
                     labels={"run": t("sweeps_run_start"), "documents": t("sweeps_documents"), "root": ""})
        fig.update_xaxes(type="category")
        fig.update_layout(height=340, margin=dict(t=10, b=10), barmode="stack")
        st.plotly_chart(fig, key="sweeps.runs_chart")
with right:
    st.subheader(t("sweeps_expired_now"))
    fig = px.bar(plot_frame(expired), x="root", y="expired", color="root", text="expired", color_discrete_map=ROOT_COLORS,
                 labels={"root": "", "expired": t("sweeps_documents")})
    fig.update_layout(height=340, margin=dict(t=10, b=10), showlegend=False)
    st.plotly_chart(fig, key="sweeps.expired_chart")

st.subheader(t("sweeps_forecast"))
st.caption(t("sweeps_forecast_caption"))
forecast = read(sweep_reads.expiration_forecast)
fig = px.bar(plot_frame(forecast), x="week", y="documents", color="root", color_discrete_map=ROOT_COLORS,
             labels={"week": t("sweeps_week"), "documents": t("sweeps_documents"), "root": ""})
fig.update_layout(height=360, margin=dict(t=10, b=10), barmode="stack")
st.plotly_chart(fig, key="sweeps.forecast_chart")

with st.expander(t("sweeps_config"), expanded=True):
    table(sweep_reads.ttl_configuration(), key="sweeps.config")

st.subheader(t("sweeps_log"))
table(runs, key="sweeps.log")
