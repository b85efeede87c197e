"""Checkpoints (SRE): find a thread, read its history step by step with decoded messages and tool
calls, diff two checkpoints, and see what the checkpoint tables weigh. Layout only: every figure
comes from core.history and core.storage (SQL over the canonical views)."""

from __future__ import annotations

import json

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from core import roles
from core.history import formats, tool_calls, views
from core.ids import InvalidIdentifier, ThreadId
from core.privacy import subjects as subj
from core.storage import storage
from ui import agent_server, charts, fmt
from ui import data_views as views_log
from ui.answer_context import ANSWER_PARAM, thread_answers
from ui.attribution import page_coverage
from ui.checkpoint_diff import diff_view, kind_label
from ui.common import demo_seeding, read, require_role, settings, shared_figure
from ui.errors import refused_message
from ui.i18n import lang, t
from ui.safe import md, md_code, plot_frame
from ui.storage_view import storage_detail_view, table_totals
from ui.tables import column_label, human_bytes, table
from ui.thread_cost import cost_view, thread_cost
from ui.thread_search import search_view

THREAD_KEY = "checkpoints.thread"
VIEW_KEY = "checkpoints.view"
LARGEST_N = 20
MESSAGES_SHOWN = 60
SOURCE_COLORS = {"input": "#1f77b4", "loop": "#2ca02c", "update": "#ff7f0e", "fork": "#9467bd"}
VIEWS = ["thread", "search", "cost", "storage", "server"]
BYTE_PARTS = ["checkpoint_bytes", "blob_bytes", "write_bytes"]
KIND_AVATAR = {"human": "user", "ai": "assistant", "tool": ":material/build:", "system": ":material/settings:"}

require_role(roles.SRE)
if THREAD_KEY not in st.session_state:
    st.session_state[THREAD_KEY] = st.query_params.get("thread", "")
if VIEW_KEY not in st.session_state:
    st.session_state[VIEW_KEY] = st.query_params.get("view") if st.query_params.get("view") in VIEWS else "thread"
if "checkpoints.find_by" not in st.session_state and st.query_params.get("cliente"):  # a customer's link
    st.session_state["checkpoints.find_by"] = "customer"
    st.session_state["checkpoints.customer"] = st.query_params["cliente"]


def _open_thread(table_key: str, frame: pd.DataFrame) -> None:
    rows = st.session_state[table_key].selection.rows
    if rows:
        st.session_state[THREAD_KEY] = frame.iloc[rows[0]]["thread_id"]
        st.session_state[VIEW_KEY] = "thread"
        st.query_params.pop(ANSWER_PARAM, None)  # another thread: its own answers


st.title(t("ckpt_title"))
st.caption(t("ckpt_caption"))
view = st.radio(t("ckpt_view"), VIEWS, key=VIEW_KEY, horizontal=True, format_func=lambda v: t(f"ckpt_view_{v}"))
if view == "thread":
    st.query_params.pop("view", None)
else:
    st.query_params["view"] = view


@shared_figure
def largest_figure(largest: pd.DataFrame, language: str) -> go.Figure:
    parts = largest.iloc[::-1].melt(id_vars="thread_id", value_vars=BYTE_PARTS, var_name="table", value_name="bytes")
    parts["table"] = parts["table"].map(column_label)
    fig = px.bar(
        plot_frame(parts),
        x="bytes",
        y="thread_id",
        color="table",
        orientation="h",
        labels={"thread_id": "", "bytes": t("ckpt_bytes"), "table": ""},
    )
    fig.update_layout(height=220 + 18 * len(largest), margin=dict(t=10, b=10), xaxis=dict(tickformat=",d"))
    return charts.finish(fig, counts=(), amounts=("x",))


def storage_view() -> None:
    st.subheader(t("ckpt_storage_title"))
    st.caption(t("ckpt_storage_caption"))
    table_totals()
    formats_panel()
    st.subheader(t("ckpt_largest", n=LARGEST_N))
    largest = read(views.largest_threads, LARGEST_N)
    if largest.empty:
        st.info(t("ckpt_no_recent_seeding" if demo_seeding() else "ckpt_no_recent"))
        return
    refreshed = read(storage.storage_refresh)  # the refresh that computed these rows
    if refreshed is not None:
        run = fmt.sweep_run(refreshed["sweep_run_id"], refreshed["sweep_started_at"], refreshed["computed_at"])
        st.caption(t("ckpt_largest_as_of", run=run))
    charts.draw(largest_figure(largest, lang()), key="checkpoints.largest_chart")
    st.caption(t("ckpt_open_hint"))
    table(
        largest,
        key="checkpoints.largest",
        selection_mode="single-row",
        columns=[c for c in largest.columns if c != "computed_at"],
        on_select=lambda: _open_thread("checkpoints.largest", largest),
    )


# --- storage formats (issue 28) ---------------------------------------------------------------------------


FORMATS_KEY = "checkpoints.formats"


def formats_panel() -> None:
    """The database's storage formats: what is read differently, and what cannot be read without a key. Reading
    them scans the first bytes of every blob and write, so only on request (at 10M writes a page render must not
    pay for it), shown with the time it was read."""
    st.subheader(t("ckpt_fmt_title"))
    st.caption(t("ckpt_fmt_caption"))
    if st.button(t("ckpt_fmt_read"), key=f"{FORMATS_KEY}.read"):
        st.session_state[FORMATS_KEY] = (pd.Timestamp.now(tz="UTC"), read(formats.fingerprint))
    if FORMATS_KEY not in st.session_state:
        st.caption(t("ckpt_fmt_not_read"))
        return
    at, fp = st.session_state[FORMATS_KEY]
    st.caption(t("ckpt_fmt_as_of", at=fmt.clock(at)))
    c = st.columns(6)
    c[0].metric(t("ckpt_fmt_migration"), "—" if fp.migration_version is None else f"v{fp.migration_version}")
    c[1].metric(t("ckpt_fmt_encrypted"), f"{fmt.number(fp.encrypted)} ({fmt.number(fp.encrypted_threads)})")
    c[2].metric(t("ckpt_fmt_delta"), f"{fmt.number(fp.delta_snapshots)} / {fmt.number(fp.delta_checkpoints)}")
    c[3].metric(t("ckpt_fmt_pickle"), f"{fmt.number(fp.pickle)}")
    c[4].metric(t("ckpt_fmt_json_older"), f"{fmt.number(fp.json)} / {fmt.number(fp.older_checkpoints)}")
    c[5].metric(t("ckpt_fmt_undecodable"), f"{fmt.number(fp.undecodable)}")
    _encryption_notice(fp)
    if not fp.special:
        st.caption(t("ckpt_fmt_classic"))


def _encryption_notice(fp: formats.Fingerprint) -> None:
    if not fp.encrypted:
        return
    keys = len(settings().aes_keys)
    if keys:
        st.info(t("ckpt_fmt_encrypted_keys", n=keys), icon=":material/key:")
    else:
        st.warning(t("ckpt_fmt_encrypted_nokey", n=fp.encrypted, threads=fp.encrypted_threads), icon=":material/lock:")


def thread_formats(fp: formats.Fingerprint) -> None:
    """One line naming what this thread holds beyond the classic format (nothing when it holds nothing else)."""
    parts = [
        f"{label} {fmt.number(n)}"
        for label, n in (
            (t("ckpt_fmt_encrypted"), fp.encrypted),
            (t("ckpt_fmt_delta"), fp.delta_snapshots + fp.delta_checkpoints),
            (t("ckpt_fmt_pickle"), fp.pickle),
            (t("ckpt_fmt_json_older"), fp.json + fp.older_checkpoints),
            (t("ckpt_fmt_pending_sends"), fp.pending_sends),
            (t("ckpt_fmt_undecodable"), fp.undecodable),
        )
        if n
    ]
    if parts:
        st.info(t("ckpt_fmt_thread", what=" · ".join(parts)), icon=":material/database:")
        _encryption_notice(fp)


def search() -> None:
    with st.expander(t("ckpt_find"), expanded=not st.session_state[THREAD_KEY]):
        mode = st.radio(
            t("ckpt_find_by"),
            ["recent", "customer"],
            key="checkpoints.find_by",
            horizontal=True,
            format_func=lambda m: t(f"ckpt_by_{m}"),
        )
        if mode == "customer":
            customer = st.text_input(t("ckpt_customer_id"), key="checkpoints.customer")
            if not customer:
                return
            attribution = subj.Attribution.from_settings(settings())
            page_coverage(attribution)
            found = read(views.threads_of_customer, customer, config=attribution)
            if found.empty:
                st.info(t("ckpt_no_customer", q=md(customer)))
                return
        else:
            found = read(views.recent_threads)
            if found.empty:
                st.info(t("ckpt_no_recent_seeding" if demo_seeding() else "ckpt_no_recent"))
                return
        st.caption(t("ckpt_pick_hint"))
        table(
            found,
            key="checkpoints.found",
            selection_mode="single-row",
            on_select=lambda: _open_thread("checkpoints.found", found),
        )


def source_label(source) -> str:
    """A checkpoint's source (langgraph's metadata `source`) in words."""
    return t(f"ckpt_source_{source}") if source in SOURCE_COLORS else str(source)


def timeline_chart(timeline: pd.DataFrame) -> None:
    st.subheader(t("ckpt_timeline"))
    tz = fmt.viewer_timezone()  # the steps' table below reads the same instants in the same zone
    instants = pd.to_datetime(timeline["ts"], utc=True).dropna()
    timeline = timeline.assign(ts=fmt.wall_clock(timeline["ts"], tz).to_numpy())
    fig = go.Figure(
        go.Scatter(
            x=timeline["ts"],
            y=timeline["step"],
            mode="lines",
            line=dict(color="#bbbbbb"),
            showlegend=False,
            hoverinfo="skip",
        )
    )
    hover = ["checkpoint_id", "updated_channels", "tools", "pending_writes"]
    dots = px.scatter(
        plot_frame(timeline.assign(source=timeline["source"].map(source_label))),
        x="ts",
        y="step",
        color="source",
        color_discrete_map={source_label(k): v for k, v in SOURCE_COLORS.items()},
        hover_data=hover,
        labels={c: column_label(c) for c in ["ts", "step", "source", *hover]},
    )
    dots.update_traces(marker=dict(size=11))
    for trace in dots.data:
        fig.add_trace(trace)
    axis = (
        fmt.time_ticks(instants.min().to_pydatetime(), instants.max().to_pydatetime(), tz=tz) if len(instants) else {}
    )
    fig.update_layout(
        height=320,
        margin=dict(t=10, b=10),
        xaxis=dict(title=t("ckpt_time", tz=tz), **axis),
        yaxis_title=t("ckpt_step"),
        legend_title_text=t("ckpt_source"),
        separators=fmt.plot_separators(),
        yaxis=fmt.count_axis(timeline["step"].max() + 1),
    )
    charts.show(fig, key="checkpoints.timeline_chart", counts=(), tz=tz)


def _label(row) -> str:
    ts = "—" if pd.isna(row.ts) else fmt.moment(row.ts)
    return t("ckpt_step_label", step=row.step, ts=ts, id=row.checkpoint_id[-12:])


def _present(value) -> bool:
    return isinstance(value, str) and value != ""


def messages(writes: pd.DataFrame) -> None:
    # a write to the messages channel that cannot be shown (refused or undecodable) keeps its place
    # in the conversation as a marker: a message is never silently left out
    unreadable = writes["refused_type"].notna() | (writes["undecodable"].notna() & (writes["channel"] == "messages"))
    shown = writes[writes["message_kind"].notna() | unreadable].head(MESSAGES_SHOWN)
    if shown.empty:
        return
    with st.expander(t("ckpt_conversation"), expanded=True):
        for row in shown.itertuples():
            if _present(row.refused_type) or not _present(row.message_kind):
                with st.chat_message("refused", avatar=":material/block:"):
                    if _present(row.refused_type):
                        st.error(
                            t(
                                "ckpt_refused_message",
                                type=md_code(row.refused_type),
                                step=row.step,
                                channel=md_code(row.channel),
                            ),
                            icon=":material/block:",
                        )
                    else:
                        st.error(
                            t("ckpt_undecodable_message", reason=md(row.undecodable), step=row.step),
                            icon=":material/warning:",
                        )
                continue
            kinds = row.message_kind.split(",")
            with st.chat_message(kinds[0], avatar=KIND_AVATAR.get(kinds[0])):
                head = f"**{md(', '.join(map(kind_label, kinds)))}** · {t('ckpt_step')} {row.step}"
                if _present(row.tool_name):
                    head += f" · {md_code(row.tool_name)}"
                st.markdown(head)
                if _present(row.content):
                    st.text(row.content)
                if _present(row.tool_calls):
                    words = _calls_in_words(row.tool_calls)
                    if words is None:  # not the list of calls LangChain writes: shown as it is
                        st.code(row.tool_calls, language="json")
                    else:
                        st.markdown(t("ckpt_tool_calls", calls=md_code(words)))


def _calls_in_words(text: str) -> str | None:
    """LangChain's tool calls ([{"name", "args", "id"}]) as `name(arg = value, ...)`; None for anything else
    (the exact JSON stays in the writes table below)."""
    try:
        calls = json.loads(text)
    except ValueError:
        return None
    if not isinstance(calls, list) or not all(
        isinstance(c, dict) and isinstance(c.get("args", {}), dict) for c in calls
    ):
        return None

    def value(v) -> str:
        return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)

    return "; ".join(f"{c.get('name') or '?'}({tool_calls.args_in_words(c, value)})" for c in calls)


def _reducer(name) -> str:
    return t(f"ckpt_reducer_{name}" if _present(name) else "ckpt_reducer_unknown")


def _how(row) -> str:
    """How a channel's value was read, in words: a DeltaChannel's is never shown as absent or empty."""
    if row.source == "rebuilt":
        return t("ckpt_value_rebuilt", reducer=_reducer(row.reducer))
    if row.source == "unrebuilt":
        if pd.isna(row.snapshot_step):
            return t("ckpt_value_unrebuilt_start", n=int(row.writes_since))
        return t("ckpt_value_unrebuilt", step=int(row.snapshot_step), n=int(row.writes_since))
    return t(f"ckpt_value_{row.source}")


def checkpoint_values(thread_id: ThreadId, checkpoint_id: str, ns: str) -> None:
    st.markdown(f"**{t('ckpt_values')}**")
    values = read(views.checkpoint_values, thread_id, checkpoint_id, ns)
    shown = values.assign(source=[_how(row) for row in values.itertuples()])
    table(
        shown,
        key="checkpoints.values",
        columns=["channel", "source", "value", "version"],
        config={"value": {"width": "large"}},
    )


def delta_channels(thread_id: ThreadId) -> None:
    channels = read(views.delta_channels, thread_id)
    if channels.empty:
        return
    st.subheader(t("ckpt_delta_channels"))
    st.caption(t("ckpt_delta_caption"))
    table(
        channels.assign(reducer=channels["reducer"].map(_reducer)),
        key="checkpoints.delta",
        columns=["channel", "reducer", "snapshots_checked", "contradicted"],
    )


def step_writes(thread_id: ThreadId, timeline: pd.DataFrame) -> None:
    st.subheader(t("ckpt_step_writes"))
    st.caption(t("ckpt_step_writes_caption"))
    labels = {row.checkpoint_id: _label(row) for row in timeline.itertuples()}
    choice = st.selectbox(
        t("ckpt_checkpoint"),
        ["", *labels],
        key="checkpoints.step",
        format_func=lambda c: labels.get(c, t("ckpt_all_steps")),
    )
    if choice:
        checkpoint_values(thread_id, choice, timeline.loc[timeline["checkpoint_id"] == choice, "checkpoint_ns"].iloc[0])
    writes = read(views.step_writes, thread_id, choice or None)
    if writes.empty:
        st.info(t("ckpt_no_writes"))
        return
    messages(writes)
    table(
        writes,
        key="checkpoints.writes",
        columns=[
            "step",
            "channel",
            "message_kind",
            "tool_name",
            "content",
            "tool_calls",
            "size_bytes",
            "blob_type",
            "task_path",
            "idx",
            "payload",
            "refused_type",
            "undecodable",
            "checkpoint_id",
            "task_id",
        ],
        config={"payload": {"width": "large"}, "content": {"width": "medium"}},
    )


def thread_view() -> None:
    search()
    typed = st.text_input(t("ckpt_thread_id"), key=THREAD_KEY)
    if not typed:
        st.query_params.pop("thread", None)
        st.info(t("ckpt_type_thread"))
        return
    try:
        thread_id = ThreadId.parse(typed)
    except InvalidIdentifier as exc:
        st.error(refused_message(typed, exc, "ckpt_thread_invalid"))
        return
    if st.query_params.get("thread", thread_id) != thread_id:  # another thread typed: the answer was the other's
        st.query_params.pop(ANSWER_PARAM, None)
    st.query_params["thread"] = thread_id
    found = read(views.find_thread, thread_id)
    if found.empty:
        st.info(t("ckpt_no_thread", q=md(thread_id)))
        return
    summary = found.iloc[0]
    purpose = views_log.purpose_input()
    if not views_log.allowed(purpose):
        return
    customer = summary["cliente_id"] if isinstance(summary["cliente_id"], str) and summary["cliente_id"] else None
    views_log.record(roles.SRE, "thread", [(thread_id, customer)], purpose)
    storage = read(views.thread_storage, thread_id)
    c = st.columns(6)
    c[0].metric(t("ckpt_customer"), md(summary["cliente_id"] or "—"))
    c[1].metric(t("ckpt_checkpoints"), fmt.number(storage["checkpoints"]))
    c[2].metric(t("ckpt_steps"), f"{summary['last_step']}")
    c[3].metric(t("ckpt_writes"), fmt.number(storage["writes"]))
    c[4].metric(
        t("ckpt_blob_bytes"), human_bytes(storage["blob_bytes"]), help=fmt.count("ckpt_n_bytes", storage["blob_bytes"])
    )
    c[5].metric(
        t("ckpt_write_bytes"),
        human_bytes(storage["write_bytes"]),
        help=fmt.count("ckpt_n_bytes", storage["write_bytes"]),
    )
    thread_cost(thread_id)
    thread_formats(read(formats.fingerprint, thread_id))
    delta_channels(thread_id)
    timeline = read(views.thread_timeline, thread_id)
    bad = int(timeline["undecodable_writes"].sum())
    if bad:
        st.warning(t("ckpt_undecodable", n=bad), icon=":material/warning:")
    refused = timeline[timeline["refused_writes"].notna() | timeline["refused_value"].notna()]
    if not refused.empty:
        types = sorted(
            {
                x
                for v in refused["refused_writes"].dropna().tolist() + refused["refused_value"].dropna().tolist()
                for x in v.split(",")
            }
        )
        st.error(
            t(
                "ckpt_refused",
                n=len(refused),
                steps=", ".join(str(s) for s in refused["step"].tolist()),
                types=", ".join(md_code(x) for x in types),
            ),
            icon=":material/block:",
        )
    thread_answers(thread_id, "checkpoints.ctx")  # issue 56: what the agent had in hand at each answer
    timeline_chart(timeline)
    table(
        timeline.assign(source=timeline["source"].map(source_label)),
        key="checkpoints.timeline",
        columns=[
            "step",
            "ts",
            "source",
            "updated_channels",
            "tools",
            "pending_writes",
            "pending_write_bytes",
            "undecodable_writes",
            "refused_writes",
            "refused_value",
            "checkpoint_bytes",
            "checkpoint_id",
            "parent_checkpoint_id",
            "checkpoint_ns",
        ],
    )
    step_writes(thread_id, timeline)
    diff_view(thread_id, timeline, _label)


if view == "storage":
    storage_view()
    storage_detail_view(st.session_state[THREAD_KEY])
elif view == "search":
    search_view()
elif view == "cost":
    cost_view()
elif view == "server":  # an Agent Protocol server's threads and runs (issue 53)
    agent_server.server_view()
else:
    thread_view()
