"""The Checkpoints page's tokens and cost (core/history/usage.py): per agent, per day and per thread over a
period, and one thread's line in its view. A thread without usage metadata says so and a model without a price
says "no price": neither is ever shown as 0. Prices come from the configuration (MODEL_PRICES). Layout only."""

from __future__ import annotations

from datetime import date, timedelta

import pandas as pd
import plotly.express as px
import streamlit as st

from core.history import usage
from ui import charts, fmt
from ui.common import read, settings
from ui.i18n import t
from ui.safe import md_code, plot_frame
from ui.tables import EMPTY, table

KEY = "checkpoints.cost"
THREADS_SHOWN = 100
COLUMNS = ["messages", "input_tokens", "cached_tokens", "output_tokens", "models", "cost_usd", "note"]


def _money(value) -> str:
    """USD to the millionth (a conversation costs fractions of a cent: two decimals would show it as free)."""
    return EMPTY if value is None or pd.isna(value) else "$" + fmt.number(value, 6)


def _notes(frame: pd.DataFrame) -> pd.DataFrame:
    """As shown: the cost as money text, `note` in words (no usage metadata / no price for <models> / partial)."""
    said = [
        t("cost_no_usage") if n == "no_usage" else t("cost_no_price", models=m) if n == "no_price" else ""
        for n, m in zip(frame["note"], frame["no_price"], strict=True)
    ]
    if "without_usage" in frame:  # per thread: AI messages without usage metadata make its figures partial
        said = [
            " · ".join(x for x in (note, _partial(w) if n != "no_usage" else "") if x)
            for note, n, w in zip(said, frame["note"], frame["without_usage"], strict=True)
        ]
    return frame.assign(note=said, cost_usd=frame["cost_usd"].map(_money))


def _partial(without_usage) -> str:
    return t("cost_partial", n=fmt.number(int(without_usage))) if without_usage else ""


def _prices() -> tuple:
    return settings().model_prices


def cost_view() -> None:
    st.subheader(t("cost_title"))
    st.caption(t("cost_caption"))
    prices = _prices()
    if prices:
        st.caption(t("cost_prices", models=", ".join(md_code(p.model) for p in prices)))
    else:
        st.warning(t("cost_no_prices"), icon=":material/sell:")
    today = date.today()
    period = st.date_input(
        t("period"),
        (today - timedelta(days=29), today),
        max_value=today,
        key=f"{KEY}.period",
        format=fmt.date_input_format(),
    )
    if not isinstance(period, tuple) or len(period) != 2:
        st.stop()  # the user is still picking the end date
    since, until = period
    agents = read(usage.usage_by_agent, since, until, prices)
    if agents.empty:
        st.info(t("cost_none"))
    else:
        c = st.columns(4)
        c[0].metric(t("cost_total"), _money(agents["cost_usd"].sum(min_count=1)))
        c[1].metric(t("col_input_tokens"), fmt.number(int(agents["input_tokens"].sum())))
        c[2].metric(t("col_cached_tokens"), fmt.number(int(agents["cached_tokens"].sum())))
        c[3].metric(t("col_output_tokens"), fmt.number(int(agents["output_tokens"].sum())))
        if (agents["note"] == "no_price").any():
            unpriced = sorted({m for v in agents["no_price"] for m in v.split(", ") if m})
            # model names come from the agents' messages: escaped, never read as Markdown
            st.warning(t("cost_unpriced", models=", ".join(md_code(m) for m in unpriced)), icon=":material/sell:")
        st.markdown(f"**{t('cost_by_agent')}**")
        table(
            _notes(agents.assign(agent=agents["agent"].replace("", t("cost_no_agent")))),
            key=f"{KEY}.agents",
            columns=["agent", *COLUMNS],
        )
        days = read(usage.usage_by_day, since, until, prices)
        st.markdown(f"**{t('cost_by_day')}**")
        chart = days.assign(
            agent=days["agent"].replace("", t("cost_no_agent")), tokens=days["input_tokens"] + days["output_tokens"]
        )
        fig = px.bar(
            plot_frame(chart),
            x="day",
            y="tokens",
            color="agent",
            labels={"day": "", "tokens": t("cost_tokens"), "agent": ""},
        )
        days_shown = sorted(chart["day"].unique())
        # plotly's own date ticks are English month names: the language's, about seven of them
        fig.update_layout(
            height=280, margin=dict(t=10, b=10), xaxis=fmt.date_ticks(days_shown, every=max(1, len(days_shown) // 7))
        )
        charts.show(fig, key=f"{KEY}.days_chart")
        table(_notes(chart.drop(columns="tokens")), key=f"{KEY}.days", columns=["day", "agent", *COLUMNS])
    st.markdown(f"**{t('cost_by_thread', n=THREADS_SHOWN)}**")
    threads = read(usage.usage_by_thread, since, until, prices, THREADS_SHOWN)
    if threads.empty:
        st.info(t("cost_no_threads"))
        return
    missing = int((threads["note"] == "no_usage").sum())
    if missing:
        st.info(
            t("cost_threads_without_usage", n=fmt.number(missing), total=fmt.number(len(threads))),
            icon=":material/help:",
        )
    table(_notes(threads), key=f"{KEY}.threads", columns=["thread_id", "agent", "updated_at", *COLUMNS])


def thread_cost(thread_id: str) -> None:
    """One line in a thread's view: its tokens and cost, or that its messages carry no usage metadata."""
    rows = read(usage.thread_usage, thread_id, _prices())
    if rows.empty:
        st.caption(t("cost_thread_no_usage"))
        return
    unpriced = rows.loc[rows["cost_usd"].isna(), "model"].tolist()
    st.caption(
        t(
            "cost_thread",
            input=fmt.number(int(rows["input_tokens"].sum())),
            cached=fmt.number(int(rows["cached_tokens"].sum())),
            output=fmt.number(int(rows["output_tokens"].sum())),
            models=", ".join(md_code(m or "?") for m in rows["model"]),
            cost=_money(rows["cost_usd"].sum(min_count=1)),
        )
        + (t("cost_no_price", models=", ".join(md_code(m or "?") for m in unpriced)) if unpriced else "")
        + (" · " + _partial(rows["without_usage"].iloc[0]) if rows["without_usage"].iloc[0] else "")
    )
