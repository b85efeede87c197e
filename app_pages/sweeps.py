"""Sweeps (SRE): the sweep job's runs and what each deleted, what is expired now, what will expire, the TTL policy
in force, and a manual "sweep now" (with history pruning) that shows its dry run before it may run. Layout only:
every figure comes from core.operations.sweep_reads."""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from core import csv_export, roles
from core.memory import reads
from core.operations import sweep, sweep_reads
from core.storage import prune
from ui import capture, charts, common, fmt
from ui.common import get_db, read, require_role, root_colors, root_label, shared_figure
from ui.i18n import lang, t
from ui.safe import md, plot_frame
from ui.tables import human_bytes, table

RUNS_LIMIT = 200
DIALOG_KEY = "sweeps.dialog"
FLASH_KEY = "sweeps.flash"
PREVIEW_KEY = "sweeps.preview_result"  # (parameters, the dry run's SweepResult) shown in the dialog
JOB_KEY = "sweeps.job"  # the sweep.SweepJob this session started, while the page has not seen its end
MEMORY_TOP_N = 20  # the Memory page's top prefixes, refreshed after a sweep


def trigger_label(trigger: str) -> str:
    """What started a sweep (core.operations.sweep.TRIGGERS) in the UI's words."""
    return t(f"sweeps_trigger_{trigger}") if trigger in sweep.TRIGGERS else str(trigger)


# One colour per namespace root on every chart of the page.

user = require_role(roles.SRE)

if FLASH_KEY in st.session_state:
    icon, message = st.session_state.pop(FLASH_KEY)
    st.toast(message, icon=icon)

st.title(t("sweeps_title"))
st.caption(t("sweeps_caption"))
capture.freshness_note()  # expired documents and the forecast are kept by the change follower

# a run left 'running' by a process that is gone: 'stopped', with the reason, on this page and every other
if common.call_now(sweep.close_dead_runs):
    common.forget(sweep_reads.sweep_runs, RUNS_LIMIT)
    common.forget(sweep_reads.last_sweep)

expired = read(sweep_reads.expired_by_root)
runs = read(sweep_reads.sweep_runs, RUNS_LIMIT)

st.subheader(t("sweeps_state_now"))
cols = st.columns(len(expired) + 1)
for col, row in zip(cols, expired.itertuples(), strict=False):  # the last column is not a root's
    col.metric(t("sweeps_expired_metric", root=md(root_label(row.root))), fmt.number(row.expired))
last = read(sweep_reads.last_sweep)  # a dry run is not a sweep
cols[-1].metric(
    # the run named by its id, as the pages that show its figures name it (ui.fmt.sweep_run)
    t("sweeps_last_run") if last is None else t("sweeps_last_run_id", id=last["id"]),
    t("sweeps_never") if last is None else fmt.short(last["started_at"]),
    None if last is None else md(f"{t('sweeps_status_' + last['status'])} · {trigger_label(last['trigger'])}"),
    delta_color="off",
    delta_arrow="off",
    help=t("sweeps_last_run_help", tz=fmt.viewer_timezone()),  # the zone in the help: the label is read whole
)


def _forget_affected() -> None:
    """Drop the cached reads a sweep changes: this page's and the Memory page's store figures."""
    for fn, args in [
        (sweep_reads.expired_by_root, ()),
        (sweep_reads.sweep_runs, (RUNS_LIMIT,)),
        (sweep_reads.deleted_per_run, (RUNS_LIMIT,)),
        (sweep_reads.expiration_forecast, ()),
        (sweep_reads.last_sweep, ()),
        (reads.memory_totals, ()),
        (reads.documents_by_root, ()),
        (reads.oversized_customers, ()),
        (reads.top_prefixes, (MEMORY_TOP_N,)),
    ]:
        common.forget(fn, *args)


def _close_dialog() -> None:
    for key in (DIALOG_KEY, PREVIEW_KEY):
        st.session_state.pop(key, None)


def _run(params: dict, dry_run: bool) -> sweep.SweepResult:
    """A manual run with `params` (retention days, prune policy), in a thread of its own (it goes on to its end if the
    user leaves or reruns the page), its steps shown here as it goes."""
    job = sweep.start_sweep(
        get_db(),
        trigger="manual",
        dry_run=dry_run,
        operator=user.email or user.name,
        on_end=None if dry_run else _forget_affected,  # every session's figures, whoever still watches the run
        **params,
    )
    if not dry_run:  # a rerun or another page interrupts this wait, not the run: the page follows it (_left_run)
        st.session_state[JOB_KEY] = job
    return _follow(job, dry_run)


STATUSES = ("dry_run", "error", "locked", "ok", "running", "stopped")  # sweeps_status_<status>
PHYSICAL_WORDS = {  # core.privacy.physical's files statuses, as the step's detail names them
    "overwritten": "sweeps_physical_overwritten",
    "in free space until reused or rewritten": "sweeps_physical_free",
    "not measured": "sweeps_physical_not_measured",
}


def _requests(numbers: str) -> str:
    """ "#1, #3" (request numbers as the job's texts write them) as the language's list of numbers."""
    return ", ".join(md(n.strip().lstrip("#")) for n in numbers.split(","))


def _step_detail(stage: str, detail: str) -> str:
    """A step's detail in the page's language: the job's English texts (the re-check's and the physical erasure's
    summaries, the lock's run, a status) read back through core.operations.sweep_reads (issue 54 #5)."""
    if stage == "erasure":
        n, clean, back = sweep_reads.recheck_parts(detail)
        if n is not None:
            parts = [fmt.count("sweeps_recheck_requests", n), fmt.count("sweeps_recheck_clean", clean)]
            if back:
                parts.append(fmt.count("sweeps_recheck_back", n - clean, requests=_requests(back)))
            return ", ".join(parts)
    elif stage == "physical":
        settled = sweep_reads.physical_parts(detail)
        if settled == {}:
            return t("sweeps_physical_nothing")
        if settled is not None:
            return "; ".join(
                f"{t(PHYSICAL_WORDS[k]) if k in PHYSICAL_WORDS else md(k)}: {_requests(', '.join(v))}"
                for k, v in settled.items()
            )
    elif stage == "locked":
        run = sweep_reads.locked_run(detail)
        if run is not None:
            return fmt.number(run)
    elif stage == "done" and detail in STATUSES:
        return t(f"sweeps_status_{detail}")
    return md(detail)


def step_text(stage: str, detail: str) -> str:
    """What the page says of one step of a run (core.operations.sweep's on_step), in its language."""
    return t(f"sweeps_step_{stage}", detail=_step_detail(stage, detail))


def _follow(job: sweep.SweepJob, dry_run: bool) -> sweep.SweepResult:
    """Show `job`'s steps until it ends; its result."""
    with st.status(t("sweeps_previewing" if dry_run else "sweeps_running"), expanded=not dry_run) as status:
        bar = st.progress(0.0)
        shown = 0
        while True:
            ended = job.done.wait(0.25)
            steps = job.steps[shown:]
            if steps and not shown and not dry_run:  # its row is written: every session's log and last sweep show it
                common.forget(sweep_reads.sweep_runs, RUNS_LIMIT)
                common.forget(sweep_reads.last_sweep)
            shown += len(steps)
            for stage, fraction, detail in steps:
                bar.progress(min(max(fraction, 0.0), 1.0))
                st.write(step_text(stage, detail))
            if ended:
                break
        st.session_state.pop(JOB_KEY, None)  # seen to its end here
        result = job.outcome()
        status.update(
            label=t("sweeps_step_done", detail=t(f"sweeps_status_{result.status}")),
            state="error" if result.status == "error" else "complete",
            expanded=False,
        )
    return result


def _outcome(result: sweep.SweepResult) -> tuple[str, str]:
    """What a toast says of a run that ended: (icon, message)."""
    if result.locked:
        flash = (":material/lock:", t("sweeps_locked"))
    elif result.status == "error":
        flash = (":material/error:", t("sweeps_failed", id=result.run_id, error=md(result.error)))
    else:
        flash = (
            ":material/cleaning_services:",
            t(
                "sweeps_done",
                id=result.run_id,
                docs=result.documents_deleted,
                vectors=result.vectors_deleted,
                threads=result.threads_deleted,
                checkpoints=result.prune.checkpoints if result.prune else 0,
                bytes=human_bytes(result.prune.bytes if result.prune else 0),
            ),
        )
    return flash


def _left_run() -> None:
    """A real run this session started and left (another page, a rerun) before its end: it went on in its thread;
    the page follows it, then says how it ended."""
    job = st.session_state.get(JOB_KEY)
    if job is None:
        return
    if not job.done.is_set():

        @st.fragment(run_every=1)
        def follow() -> None:
            if job.done.is_set():
                st.rerun(scope="app")
            step = step_text(job.steps[-1][0], job.steps[-1][2]) if job.steps else "…"
            st.info(t("sweeps_still_running", step=step), icon=":material/hourglass_top:")

        follow()
        return
    st.session_state.pop(JOB_KEY)
    if job.error is not None:
        st.toast(t("sweeps_failed", id="?", error=md(job.error)), icon=":material/error:")
    else:
        icon, message = _outcome(job.result)
        st.toast(message, icon=icon)


def _what_goes(result: sweep.SweepResult) -> None:
    """What a dry run found: the totals, then the documents' keys and the threads, listed."""
    pruned = result.prune
    st.write(
        t(
            "sweeps_preview_totals",
            id=result.run_id,
            docs=result.documents_deleted,
            threads=len(result.threads),
            checkpoints=pruned.checkpoints if pruned else 0,
            writes=pruned.writes if pruned else 0,
            blobs=pruned.blobs if pruned else 0,
            pruned=len(pruned.threads) if pruned else 0,
            bytes=human_bytes(pruned.bytes if pruned else 0),
        )
    )
    _run_lists(read(sweep_reads.run_details, result.run_id), f"sweeps.preview.{result.run_id}")


def _run_lists(details: dict, key: str) -> None:
    for name, title in (
        ("documents", "sweeps_list_documents"),
        ("threads", "sweeps_list_threads"),
        ("pruned", "sweeps_list_pruned"),
    ):
        frame = details[name]
        with st.expander(t(title, n=len(frame)), expanded=False):
            if frame.empty:
                st.caption(t("sweeps_list_empty"))
            else:
                table(frame, key=f"{key}.{name}")
    if not details["pruned"].empty:
        st.download_button(
            t("sweeps_download_pruned"),
            csv_export.to_csv(details["pruned"]),
            file_name=f"{key.replace('.', '-')}-pruned-threads.csv",
            mime="text/csv",
            key=f"{key}.download",
            icon=":material/download:",
        )


@st.dialog(t("sweeps_dialog_title"), on_dismiss=_close_dialog, width="large")
def sweep_dialog() -> None:
    st.write(t("sweeps_dialog_text", n=int(expired["expired"].sum())))
    try:
        default_days = sweep.default_retention_days()
    except sweep.SweepInputError as exc:  # a bad SWEEP_RETENTION_DAYS: say so, offer the built-in default
        st.warning(md(exc))
        default_days = sweep.DEFAULT_RETENTION_DAYS
    days = st.number_input(
        t("sweeps_retention_days"), min_value=1, max_value=3650, value=default_days, step=1, key="sweeps.days"
    )
    params: dict = {"retention_days": int(days), "prune": None}
    if st.checkbox(t("sweeps_prune"), key="sweeps.prune", help=t("sweeps_prune_help")):
        left, right = st.columns(2)
        keep = left.number_input(
            t("sweeps_keep_latest"), min_value=1, max_value=100_000, value=20, step=1, key="sweeps.keep_latest"
        )
        idle = right.number_input(
            t("sweeps_idle_minutes"), min_value=0, max_value=525_600, value=60, step=5, key="sweeps.idle_minutes"
        )
        params["prune"] = prune.validate_policy(int(keep), int(idle))
    # Dry run first: the sweep is offered only for the parameters whose dry run the user has just seen.
    if st.button(t("sweeps_preview"), key="sweeps.preview", icon=":material/visibility:"):
        st.session_state[PREVIEW_KEY] = (params, _run(params, dry_run=True))
        common.forget(sweep_reads.sweep_runs, RUNS_LIMIT)
    previewed, preview = st.session_state.get(PREVIEW_KEY, (None, None))
    if preview is None:
        st.caption(t("sweeps_preview_first"))
    elif previewed != params:
        st.warning(t("sweeps_preview_stale"))
    elif preview.locked:
        st.warning(t("sweeps_locked"))
    else:
        _what_goes(preview)
    ready = preview is not None and previewed == params and not preview.locked
    confirmed = st.checkbox(t("sweeps_confirm"), key="sweeps.confirm", disabled=not ready)
    if not st.button(t("sweeps_run"), key="sweeps.run", type="primary", disabled=not (ready and confirmed)):
        return
    _close_dialog()  # its steps show in this dialog; a rerun meanwhile finds the run on the page (_left_run)
    result = _run(params, dry_run=False)
    st.session_state[FLASH_KEY] = _outcome(result)
    st.rerun()


_left_run()
if st.button(t("sweeps_now"), key="sweeps.now", icon=":material/cleaning_services:", type="primary"):
    st.session_state[DIALOG_KEY] = True
    st.session_state.pop(PREVIEW_KEY, None)
if st.session_state.get(DIALOG_KEY):
    # Stays open across full reruns until the sweep ran or the user dismissed it.
    sweep_dialog()


@shared_figure
def runs_figure(per_run: pd.DataFrame, language: str, tz: str) -> go.Figure:
    # `tz`: the viewer's time zone, which the run labels are in (a chart shared only with viewers in the same one)
    per_run = per_run.assign(
        trigger=per_run["trigger"].map(trigger_label),
        root=per_run["root"].map(root_label),
        run=[f"#{i} · {fmt.short(at)}" for i, at in zip(per_run["run_id"], per_run["started_at"], strict=True)],
    )
    frame = plot_frame(per_run.sort_values(["started_at", "run_id"], kind="stable"))
    fig = px.bar(
        frame,
        x="run",
        y="documents",
        color="root",
        hover_data=["started_at", "trigger"],
        color_discrete_map=root_colors(),
        labels={"run": t("sweeps_run_start", tz=tz), "documents": t("sweeps_documents"), "root": ""},
    )
    # the runs in the order they ran, stated: plotly's own order is each root's trace after the other, so a run
    # deleting only from a later root was drawn after every run of the first (issue 54 #3)
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=list(dict.fromkeys(frame["run"])))
    fig.update_layout(height=340, margin=dict(t=10, b=10), barmode="stack")
    return charts.finish(fig)


@shared_figure
def expired_figure(expired: pd.DataFrame, language: str) -> go.Figure:
    fig = px.bar(
        plot_frame(expired.assign(root=expired["root"].map(root_label))),
        x="root",
        y="expired",
        color="root",
        text="expired",
        color_discrete_map=root_colors(),
        labels={"root": "", "expired": t("sweeps_documents")},
    )
    fig.update_layout(height=340, margin=dict(t=10, b=10), showlegend=False)
    return charts.finish(fig)


@shared_figure
def forecast_figure(forecast: pd.DataFrame, language: str) -> go.Figure:
    fig = px.bar(
        plot_frame(forecast.assign(root=forecast["root"].map(root_label))),
        x="week",
        y="documents",
        color="root",
        color_discrete_map=root_colors(),
        labels={"week": t("sweeps_week"), "documents": t("sweeps_documents"), "root": ""},
    )
    # plotly's own date ticks are English month names: the language's, one every eight weeks
    fig.update_layout(
        height=360,
        margin=dict(t=10, b=10),
        barmode="stack",
        xaxis=fmt.date_ticks(sorted(forecast["week"].unique()), every=8),
    )
    return charts.finish(fig)


left, right = st.columns(2)
with left:
    st.subheader(t("sweeps_runs_chart"))
    per_run = read(sweep_reads.deleted_per_run, RUNS_LIMIT)
    if per_run.empty:
        st.info(t("sweeps_no_runs"))
    else:
        charts.draw(runs_figure(per_run, lang(), fmt.viewer_timezone()), key="sweeps.runs_chart")
with right:
    st.subheader(t("sweeps_expired_now"))
    if not expired["expired"].any():  # an empty bar chart draws a meaningless axis
        st.info(t("sweeps_no_expired"))
    else:
        charts.draw(expired_figure(expired, lang()), key="sweeps.expired_chart")

st.subheader(t("sweeps_forecast"))
st.caption(t("sweeps_forecast_caption"))
forecast = read(sweep_reads.expiration_forecast)
if not forecast["documents"].any():
    st.info(t("sweeps_no_forecast"))
else:
    charts.draw(forecast_figure(forecast, lang()), key="sweeps.forecast_chart")

with st.expander(t("sweeps_config"), expanded=True):
    config = sweep_reads.ttl_configuration()
    sweeper = config.pop("in_process_sweeper_minutes")
    config["in_process_sweeper"] = sweeper.map(
        lambda m: (
            t("sweeps_in_process_off") if m is None or pd.isna(m) else t("sweeps_in_process_every", n=fmt.number(m))
        )
    )
    table(config.assign(root=config["root"].map(root_label)), key="sweeps.config")

st.subheader(t("sweeps_log"))
st.caption(t("sweeps_log_caption"))
log = runs.assign(
    status=[t(f"sweeps_status_{s}") for s in runs["status"]],
    trigger=runs["trigger"].map(trigger_label),
    deleted_by_root=runs["deleted_by_root"].map(
        lambda d: ", ".join(f"{root_label(k)}: {fmt.number(v)}" for k, v in (d or {}).items() if v) or "—"
    ),
)
table(log, key="sweeps.log", columns=[c for c in log.columns if c != "dry_run"])
if not runs.empty:
    st.subheader(t("sweeps_run_detail"))
    by_id = runs.set_index("id")
    run_id = st.selectbox(
        t("sweeps_run_pick"),
        by_id.index.tolist(),
        key="sweeps.detail_run",
        format_func=lambda i: t(
            "sweeps_run_option",
            id=i,
            at=fmt.moment(by_id.at[i, "started_at"]),
            status=t("sweeps_status_" + by_id.at[i, "status"]),
        ),
    )
    _run_lists(read(sweep_reads.run_details, int(run_id)), f"sweeps.run.{run_id}")
