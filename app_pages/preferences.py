"""Preferences (store managers): preference writes per customer conversation, daily, by tipo."""
from __future__ import annotations

from datetime import date, timedelta

import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from core import roles
from core.checkpoints import tool_calls
from core.memory import preferences
from ui.common import call_now, forget, read, require_role
from ui.tables import table
from ui.i18n import t
from ui.safe import md, plot_frame

TARGET_RATIO = 0.1  # the seed's target: one preference write every ten conversations
PAGE_SIZE = 50
APPLIED_THREADS = 500  # recent conversations decoded for "preferences applied"

require_role(roles.MANAGER)
st.title(t("prefs_title"))
st.caption(t("prefs_caption", target=TARGET_RATIO))

today = date.today()
period = st.date_input(t("period"), (today - timedelta(days=29), today), max_value=today, key="preferences.period")
if not isinstance(period, tuple) or len(period) != 2:
    st.stop()  # the user is still picking the end date
since, until = period


def _forget_reads() -> None:
    """After an extraction added rows: drop this page's cached reads (only these)."""
    forget(preferences.preference_daily, since, until)
    forget(preferences.conversations, since, until)
    forget(preferences.clocks, since, until)
    forget(preferences.preference_by_tipo, since, until)
    forget(preferences.preferences_applied, APPLIED_THREADS)
    for page in range(1, int(st.session_state.get("preferences.page", 1)) + 1):
        forget(preferences.writing_conversations, since, until, PAGE_SIZE, (page - 1) * PAGE_SIZE)


# Tool calls come from the checkpoints through an incremental extraction (the sweep job advances
# it); a page view moves it forward a bounded step, never decodes the whole history.
extracted = call_now(tool_calls.catch_up)
if extracted.calls or extracted.thread_days:
    _forget_reads()
    st.caption(t("prefs_extracted", calls=extracted.calls, checkpoints=extracted.checkpoints))
if extracted.error:
    st.warning(t("prefs_cannot_extract", error=md(extracted.error), n=f"{extracted.behind:,}"))
elif not extracted.caught_up:
    st.warning(t("prefs_behind", n=f"{extracted.behind:,}"))
    if st.button(t("prefs_extract_now"), key="preferences.extract"):
        with st.status(t("prefs_extracting")) as status:
            done = call_now(tool_calls.extract, on_batch=lambda r: status.update(
                label=f"{t('prefs_extracting')} {r.checkpoints:,}"))
            status.update(label=t("prefs_extracted", calls=done.calls, checkpoints=done.checkpoints), state="complete")
        _forget_reads()
        st.rerun()

daily = read(preferences.preference_daily, since, until)
conversations, writes = read(preferences.conversations, since, until), int(daily["writes"].sum())
ratio = writes / conversations if conversations else None
c1, c2, c3 = st.columns(3)
c1.metric(t("conversations"), f"{conversations:,}")
c2.metric(t("pref_writes"), f"{writes:,}")
c3.metric(t("ratio"), "–" if ratio is None else f"{ratio:.3f}",
          None if ratio is None else f"{ratio - TARGET_RATIO:+.3f} vs {t('target')} {TARGET_RATIO}")

replayed = read(preferences.clocks, since, until).get("replayed", 0)
st.caption(t("prefs_clock", replayed=t("prefs_clock_replayed", n=replayed) if replayed else ""))

if conversations == 0:
    st.info(t("no_data"))
    st.stop()

fig = go.Figure()
fig.add_bar(x=daily["day"], y=daily["conversations"], name=t("conversations"), yaxis="y2", opacity=0.25)
fig.add_scatter(x=daily["day"], y=daily["ratio"], name=t("ratio"), mode="lines+markers")
fig.add_hline(y=TARGET_RATIO, line_dash="dash", line_color="red", annotation_text=f"{t('target')} {TARGET_RATIO}")
fig.update_layout(height=360, margin=dict(t=10, b=10), legend=dict(orientation="h"),
                  yaxis=dict(title=t("ratio"), rangemode="tozero"),
                  yaxis2=dict(title=t("conversations"), overlaying="y", side="right", showgrid=False))
st.plotly_chart(fig, key="preferences.daily_chart")

left, right = st.columns([1, 2])
with left:
    st.subheader(t("by_tipo"))
    by_tipo = read(preferences.preference_by_tipo, since, until)
    fig = px.bar(plot_frame(by_tipo), x="tipo", y="writes", text="writes", labels={"tipo": "", "writes": t("pref_writes")})
    fig.update_layout(height=300, margin=dict(t=10, b=10))
    st.plotly_chart(fig, key="preferences.tipo_chart")
with right:
    st.subheader(t("writers"))
    page = st.number_input(t("page"), 1, 10_000, 1, key="preferences.page")
    writers = read(preferences.writing_conversations, since, until, PAGE_SIZE, (page - 1) * PAGE_SIZE)
    table(writers, key="preferences.writers")

st.subheader(t("applied_title"))
st.caption(t("applied_caption", n=APPLIED_THREADS))
applied = read(preferences.preferences_applied, APPLIED_THREADS)
c1, c2, c3 = st.columns(3)
c1.metric(t("applied_rate"), "–" if applied.rate is None else f"{applied.rate:.0%}")
c2.metric(t("applied_with_pref"), f"{applied.with_preference:,}")
c3.metric(t("applied_changed"), f"{applied.changed_by_memory:,}")
if applied.with_preference == 0:
    st.info(t("applied_none"))
elif applied.changed_by_memory == 0:
    st.error(t("applied_useless"))
else:
    shown = applied.proposals[applied.proposals["followed"].notna()].sort_values(["followed", "ts"], ascending=[True, False])
    table(shown, key="preferences.applied")
