"""The Checkpoints page's Storage view, where the bytes go (core/storage/storage_detail.py): PostgreSQL's table
statistics, bytes per channel, threads growing faster than linearly, orphans (threads the application no longer
knows included), one thread's channels and curve per
step, and what a prune policy would free. Layout only; values from the database are shown in tables and charts,
never interpolated into Markdown."""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import streamlit as st

from core.storage import prune, storage, storage_detail
from ui import charts, fmt
from ui.common import read
from ui.fmt import number
from ui.i18n import t
from ui.safe import plot_frame
from ui.tables import human_bytes, table

GROWING_N = 20
UNKNOWN_N = 20
KEY = "checkpoints.storage"


def _as_of(value) -> str:
    return fmt.moment(pd.Timestamp(value).to_pydatetime())


def _by_run(found: dict) -> str:
    """The sweep run that computed a figure of the storage refresh (`found`: its row)."""
    return fmt.sweep_run(found["sweep_run_id"], found["sweep_started_at"], found["as_of"])


def table_totals() -> None:
    """Rows and on-disk size of each checkpoint table and in all, each row of figures with its own time: the rows
    as of the last sweep (or counted now before the first), the sizes as read now."""
    totals = read(storage.table_totals)
    if totals.empty:
        return
    names = [*totals["table_name"], t("ckpt_total")]
    rows = [*totals["rows"], totals["rows"].sum()]
    sizes = [*totals["total_bytes"], totals["total_bytes"].sum()]
    for col, name, n in zip(st.columns(len(names)), names, rows, strict=True):
        col.metric(t("ckpt_table_rows", table=name), fmt.number(int(n)))
    as_of = totals["as_of"].iloc[0]
    if as_of is None or pd.isna(as_of):
        st.caption(t("ckpt_totals_live", at=fmt.moment(totals["sized_at"].iloc[0])))
    else:
        st.caption(t("ckpt_totals_as_of", run=_by_run(totals.iloc[0])))
    for col, name, n in zip(st.columns(len(names)), names, sizes, strict=True):
        col.metric(t("ckpt_table_size", table=name), human_bytes(int(n)))
    st.caption(t("ckpt_sizes_at", at=fmt.moment(totals["sized_at"].iloc[0])))


def table_statistics() -> None:
    st.subheader(t("ckpt_pg_stats"))
    stats = read(storage_detail.table_stats)
    if len(stats):
        st.caption(t("ckpt_pg_stats_as_of", at=_as_of(stats["as_of"].iloc[0])))
    total = stats[["table_bytes", "index_bytes", "toast_bytes", "total_bytes", "live_tuples", "dead_tuples"]].sum()
    shown = pd.concat([stats.drop(columns="as_of"), pd.DataFrame([{"table_name": t("ckpt_total"), **total}])])
    table(shown, key=f"{KEY}.pg_stats")


def channels() -> None:
    st.subheader(t("ckpt_channels"))
    totals = read(storage_detail.channel_totals)
    if totals.empty:
        st.info(t("ckpt_channels_none"))
        return
    st.caption(t("ckpt_channels_caption"))
    parts = (
        totals.head(15)
        .iloc[::-1]
        .melt(id_vars="channel", value_vars=["blob_bytes", "write_bytes"], var_name="kind", value_name="bytes")
    )
    parts["kind"] = parts["kind"].map({"blob_bytes": t("col_blob_bytes"), "write_bytes": t("col_write_bytes")})
    fig = px.bar(
        plot_frame(parts),
        x="bytes",
        y="channel",
        color="kind",
        orientation="h",
        labels={"channel": "", "bytes": t("ckpt_bytes"), "kind": ""},
    )
    fig.update_layout(height=160 + 22 * min(len(totals), 15), margin=dict(t=10, b=10))
    charts.show(fig, key=f"{KEY}.channels_chart", counts=(), amounts=("x",))
    table(totals, key=f"{KEY}.channels")


def growth_and_orphans() -> None:
    st.subheader(t("ckpt_growing"))
    growing = read(storage_detail.growing_threads, GROWING_N)
    if growing.empty:
        st.info(t("ckpt_growing_none"))
    else:
        st.caption(t("ckpt_growing_caption"))
        table(growing, key=f"{KEY}.growing")
    st.subheader(t("ckpt_orphans"))
    found = read(storage_detail.orphans)
    if found is None:
        st.info(t("ckpt_orphans_unknown"))
        return
    left, right = st.columns(2)
    left.metric(t("ckpt_orphan_blobs"), f"{fmt.number(found['blobs'])} · {human_bytes(found['blob_bytes'])}")
    right.metric(t("ckpt_orphan_writes"), f"{fmt.number(found['writes'])} · {human_bytes(found['write_bytes'])}")
    st.caption(t("ckpt_orphans_caption", run=_by_run(found)))
    unknown_threads()


def unknown_threads() -> None:
    """The threads the application no longer knows, when KNOWN_THREADS_QUERY can say so; otherwise why not."""
    found = read(storage_detail.unknown_threads)
    run = _by_run(found)
    if found["error"] is not None:
        st.warning(t("ckpt_unknown_threads_failed", run=run))
        st.code(found["error"], language=None)
        return
    if found["threads"] is None:
        st.info(t("ckpt_unknown_threads_unconfigured", run=run))
        return
    st.metric(
        t("ckpt_unknown_threads"),
        number(found["threads"]),
        human_bytes(found["bytes"]),
        delta_color="off",
        delta_arrow="off",
    )
    st.caption(t("ckpt_unknown_threads_caption", run=run, n=UNKNOWN_N))
    listed = read(storage_detail.unknown_thread_list, UNKNOWN_N)
    if not listed.empty:
        table(listed, key=f"{KEY}.unknown")


def one_thread(thread_id: str) -> None:
    st.subheader(t("ckpt_thread_storage"))
    thread_id = st.text_input(t("ckpt_thread_id"), value=thread_id, key=f"{KEY}.thread")
    if not thread_id:
        st.caption(t("ckpt_thread_storage_hint"))
        return
    steps = read(storage_detail.thread_steps, thread_id)
    if steps.empty:
        st.info(t("ckpt_thread_storage_none"))
        return
    fig = px.line(
        plot_frame(steps),
        x="n",
        y="cumulative",
        markers=True,
        hover_data=["step", "checkpoint_ns", "bytes"],
        labels={"n": t("ckpt_checkpoint_n"), "cumulative": t("ckpt_cumulative_bytes")},
    )
    fig.add_bar(x=steps["n"], y=steps["bytes"], name=t("ckpt_step_bytes"), opacity=0.5)
    fig.update_layout(height=320, margin=dict(t=10, b=10))
    charts.show(fig, key=f"{KEY}.steps_chart", counts=(), amounts=("y",))
    table(read(storage_detail.thread_channels, thread_id), key=f"{KEY}.thread_channels")


def prune_preview() -> None:
    st.subheader(t("ckpt_prune_preview"))
    st.caption(t("ckpt_prune_preview_caption"))
    left, right = st.columns(2)
    keep = left.number_input(
        t("sweeps_keep_latest"), min_value=1, max_value=100_000, value=20, step=1, key=f"{KEY}.keep_latest"
    )
    idle = right.number_input(
        t("sweeps_idle_minutes"), min_value=0, max_value=525_600, value=60, step=5, key=f"{KEY}.idle_minutes"
    )
    if not st.button(t("ckpt_prune_compute"), key=f"{KEY}.prune_compute", icon=":material/calculate:"):
        return
    with st.spinner(t("ckpt_prune_computing")):
        result = read(prune.preview, prune.validate_policy(int(keep), int(idle)))
    st.metric(
        t("ckpt_prune_frees"),
        human_bytes(result.bytes),
        t(
            "ckpt_prune_frees_detail",
            threads=len(result.threads),
            checkpoints=result.checkpoints,
            writes=result.writes,
            blobs=result.blobs,
        ),
        delta_color="off",
        delta_arrow="off",
    )
    if result.threads:
        frame = pd.DataFrame([t_.__dict__ for t_ in result.threads]).sort_values("bytes", ascending=False)
        table(frame, key=f"{KEY}.prune_threads")


def storage_detail_view(thread_id: str) -> None:
    """The Storage view's detail, below the tables' totals and the largest threads; `thread_id`: the thread open on
    the page (its curve and channels), empty for none."""
    table_statistics()
    channels()
    growth_and_orphans()
    one_thread(thread_id)
    prune_preview()
