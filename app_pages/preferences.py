"""Preferences (store managers): preference writes per customer conversation, daily, by tipo."""

from __future__ import annotations

from datetime import date, timedelta

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from core import roles
from core.history import tool_calls
from core.memory import preferences
from ui import charts, fmt
from ui.common import call_now, forget, read, require_role, shared_figure
from ui.i18n import lang, t
from ui.safe import md, plot_frame
from ui.scope import manager_scope, scoped_label
from ui.tables import table

TARGET_RATIO = 0.1  # the seed's target: one preference write every ten conversations
PAGE_SIZE = 50
APPLIED_THREADS = 500  # the period's most recent conversations decoded for "preferences applied"


@shared_figure
def daily_figure(daily: pd.DataFrame, language: str) -> go.Figure:
    fig = go.Figure()
    fig.add_bar(
        x=daily["day"],
        y=daily["conversations"],
        name=t("conversations"),
        yaxis="y2",
        opacity=0.25,
        hovertemplate="%{y:,d}<extra></extra>",
    )
    fig.add_scatter(
        x=daily["day"], y=daily["ratio"], name=t("ratio"), mode="lines+markers", hovertemplate="%{y:.3f}<extra></extra>"
    )
    fig.add_hline(
        y=TARGET_RATIO, line_dash="dash", line_color="red", annotation_text=f"{t('target')} {fmt.number(TARGET_RATIO)}"
    )
    fig.update_layout(
        height=360,
        margin=dict(t=10, b=10),
        legend=dict(orientation="h"),
        xaxis=fmt.date_ticks(daily["day"]),
        yaxis=dict(title=t("ratio")),
        yaxis2=dict(title=t("conversations"), overlaying="y", side="right", showgrid=False),
    )
    return charts.finish(fig, counts=("y2",), amounts=("y",))


@shared_figure
def tipo_figure(by_tipo: pd.DataFrame, language: str) -> go.Figure:
    shown = plot_frame(by_tipo)
    fig = px.bar(shown, x="tipo", y="writes", labels={"tipo": "", "writes": t("pref_writes")})
    fig.update_traces(texttemplate="%{y:,d}", hovertemplate="%{x}: %{y:,d}<extra></extra>")
    fig.update_xaxes(categoryorder="array", categoryarray=shown["tipo"].tolist())  # most first
    fig.update_layout(height=300, margin=dict(t=10, b=10))
    return charts.finish(fig)


require_role(roles.MANAGER)
st.title(t("prefs_title"))
st.caption(t("prefs_caption", target=fmt.number(TARGET_RATIO)))
with st.expander(t("prefs_technical")):
    st.caption(t("prefs_technical_text"))
# a store manager's stores (None: every store); every read below is limited to their customers in SQL
scope = manager_scope()

today = date.today()
period = st.date_input(
    t("period"),
    (today - timedelta(days=29), today),
    max_value=today,
    key="preferences.period",
    format=fmt.date_input_format(),
)
if not isinstance(period, tuple) or len(period) != 2:
    st.stop()  # the user is still picking the end date
since, until = period


def extracted_text(result: tool_calls.ExtractResult) -> str:
    """What an extraction just read, said as new calls already counted in the figures below."""
    return t(
        "prefs_extracted",
        calls=fmt.count("prefs_calls", result.calls),
        checkpoints=fmt.count("prefs_checkpoints", result.checkpoints),
    )


def _forget_reads() -> None:
    """After an extraction added rows: drop this page's cached reads (only these)."""
    forget(preferences.preference_daily, since, until, scope=scope)
    forget(preferences.conversations, since, until, scope=scope)
    forget(preferences.clocks, since, until, scope=scope)
    forget(preferences.preference_by_tipo, since, until, scope=scope)
    forget(preferences.preferences_applied, APPLIED_THREADS, since, until, scope=scope)
    forget(preferences.writing_conversation_count, since, until, scope=scope)
    for page in range(1, int(st.session_state.get("preferences.page", 1)) + 1):
        forget(preferences.writing_conversations, since, until, PAGE_SIZE, (page - 1) * PAGE_SIZE, scope=scope)


# Tool calls come from the checkpoints through an incremental extraction (the sweep job advances
# it); a page view moves it forward a bounded step, never decodes the whole history.
# (a store manager is not shown the chain's counts of calls and checkpoints: only that the figures may be incomplete)
extracted = call_now(tool_calls.catch_up)
if extracted.calls or extracted.thread_days:
    _forget_reads()
    if scope is None:
        st.caption(extracted_text(extracted))
if extracted.error:
    st.warning(t("prefs_cannot_extract", error=md(extracted.error), n=fmt.number(extracted.behind)))
elif not extracted.caught_up and scope is not None:
    st.warning(t("prefs_behind_scoped"))
elif not extracted.caught_up:
    st.warning(t("prefs_behind", n=fmt.number(extracted.behind)))
    if st.button(t("prefs_extract_now"), key="preferences.extract"):
        with st.status(t("prefs_extracting")) as status:
            done = call_now(
                tool_calls.extract,
                on_batch=lambda r: status.update(label=f"{t('prefs_extracting')} {fmt.number(r.checkpoints)}"),
            )
            status.update(label=extracted_text(done), state="complete")
        _forget_reads()
        st.rerun()


def mine(label: str) -> str:
    """A total's label, said to be the manager's stores' when the page is scoped."""
    return scoped_label(label, scope)


daily = read(preferences.preference_daily, since, until, scope=scope)
conversations, writes = read(preferences.conversations, since, until, scope=scope), int(daily["writes"].sum())
ratio = writes / conversations if conversations else None
c1, c2, c3 = st.columns(3)
c1.metric(mine(t("conversations")), fmt.number(conversations))
c2.metric(mine(t("pref_writes")), fmt.number(writes))
if ratio is None:
    c3.metric(mine(t("ratio")), "–")
else:  # the distance to the target in words: neither green nor red, the target is a level, not a score
    side = "prefs_above_target" if ratio >= TARGET_RATIO else "prefs_below_target"
    c3.metric(
        mine(t("ratio")),
        fmt.number(ratio, 3),
        t(side, diff=fmt.number(abs(ratio - TARGET_RATIO), 3), target=fmt.number(TARGET_RATIO)),
        delta_color="off",
        delta_arrow="off",
    )

replayed = read(preferences.clocks, since, until, scope=scope).get("replayed", 0)
st.caption(t("prefs_clock", replayed=fmt.count("prefs_clock_replayed", replayed) if replayed else ""))

if conversations == 0:
    st.info(t("no_data"))
    st.stop()

charts.draw(daily_figure(daily, lang()), key="preferences.daily_chart")

left, right = st.columns([1, 2])
with left:
    st.subheader(mine(t("by_tipo")))
    by_tipo = read(preferences.preference_by_tipo, since, until, scope=scope)  # most writes first
    if by_tipo.empty:
        st.info(t("chart_empty"))
    else:
        charts.draw(tipo_figure(by_tipo, lang()), key="preferences.tipo_chart")
with right:
    st.subheader(mine(t("writers")))
    total = read(preferences.writing_conversation_count, since, until, scope=scope)
    pages = max(1, -(-total // PAGE_SIZE))
    page = st.number_input(t("page_of", n=fmt.number(pages)), 1, pages, 1, key="preferences.page") if pages > 1 else 1
    writers = read(preferences.writing_conversations, since, until, PAGE_SIZE, (page - 1) * PAGE_SIZE, scope=scope)
    if writers.empty:
        st.info(t("prefs_no_writers"))
    else:
        first = (page - 1) * PAGE_SIZE + 1
        st.caption(
            t("rows_of", first=fmt.number(first), last=fmt.number(first + len(writers) - 1), n=fmt.number(total))
        )
        table(writers, key="preferences.writers", config={"tipos": t("prefs_tipos")})

st.subheader(mine(t("applied_title")))
applied = read(preferences.preferences_applied, APPLIED_THREADS, since, until, scope=scope)
st.caption(
    t(
        "applied_caption",
        n=fmt.number(APPLIED_THREADS),
        since=fmt.day(since),
        until=fmt.day(until),
        proposals=fmt.count("applied_proposals", len(applied.proposals)),
    )
)
c1, c2, c3 = st.columns(3)
c1.metric(mine(t("applied_rate")), "–" if applied.rate is None else fmt.percent(applied.rate))
c2.metric(mine(t("applied_with_pref")), fmt.number(applied.with_preference))
c3.metric(mine(t("applied_changed")), fmt.number(applied.changed_by_memory))
if applied.with_preference == 0:
    st.info(t("applied_none"))
elif applied.changed_by_memory == 0:
    st.error(t("applied_useless"))
else:
    shown = applied.proposals[applied.proposals["followed"].notna()].sort_values(
        ["followed", "ts"], ascending=[True, False]
    )
    # which clock dates a call: the demo's replayed day, or the checkpoint's own write time (as Checkpoints shows)
    shown = shown.assign(clock=shown["clock"].map(lambda c: t(f"clock_name_{c}")))
    st.caption(t("prefs_clocks_named"))
    table(shown, key="preferences.applied", config={"clock": t("prefs_clock_column")})
