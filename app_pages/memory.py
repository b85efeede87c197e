"""Memory (store managers): documents per prefix, the >4 documents alarm, one namespace in detail."""
from __future__ import annotations

import json

import pandas as pd
import plotly.express as px
import streamlit as st

from core import roles
from core.memory import reads
from core.memory.embeddings import embeddings_label
from core.memory.store import MAX_DOCS_PER_CUSTOMER, POLICIES, InvalidIdentifier
from ui.common import ROOT_COLORS, read, require_role, settings
from ui.safe import md, md_code, plot_frame
from ui.tables import table
from ui.i18n import t

TOP_N = 20
PAGE_SIZE = 50
NS_KEY = "memory.ns"

require_role(roles.MANAGER)
if NS_KEY not in st.session_state:
    st.session_state[NS_KEY] = st.query_params.get("ns", "")

st.title(t("memory_title"))
st.caption(t("memory_caption", emb=embeddings_label(settings())))

totals = read(reads.memory_totals)
c1, c2, c3, c4 = st.columns(4)
c1.metric(t("documents"), f"{totals.documents:,}")
c2.metric(t("namespaces"), f"{totals.namespaces:,}")
c3.metric(t("vectors"), f"{totals.vectors:,}")
c4.metric(t("expired"), f"{totals.expired:,}")
if totals.documents == 0:
    st.info(t("memory_empty"), icon=":material/info:")

left, right = st.columns(2)
with left:
    st.subheader(t("by_root"))
    by_root = read(reads.documents_by_root)
    fig = px.bar(plot_frame(by_root), x="root", y="documents", color="root", text="documents", color_discrete_map=ROOT_COLORS,
                 labels={"root": "", "documents": t("documents")})
    fig.update_layout(showlegend=False, height=320, margin=dict(t=10, b=10))
    st.plotly_chart(fig, key="memory.by_root_chart")
    table(by_root, key="memory.by_root")
with right:
    st.subheader(t("top_prefixes", n=TOP_N))
    top = read(reads.top_prefixes, TOP_N)
    fig = px.bar(plot_frame(top.iloc[::-1]), x="documents", y="prefix", color="root", orientation="h", color_discrete_map=ROOT_COLORS,
                 labels={"prefix": "", "documents": t("documents"), "root": ""})  # the legend names the roots
    fig.update_layout(height=320 + 12 * len(top), margin=dict(t=10, b=10))
    st.plotly_chart(fig, key="memory.top_chart")

with st.expander(t("policy")):
    table(
        pd.DataFrame([{"root": p.root, "ttl_days": p.ttl_days, "refresh_on_read": p.refresh_on_read,
                       "omit_expired": True, "in_process_sweeper": False} for p in POLICIES.values()]),
        key="memory.policy",
    )

st.subheader(t("alarm_title", n=MAX_DOCS_PER_CUSTOMER))
st.caption(t("alarm_caption", n=MAX_DOCS_PER_CUSTOMER))
oversized = read(reads.oversized_customers)


def _open_selected() -> None:
    rows = st.session_state["memory.alarm"].selection.rows
    if rows:
        st.session_state[NS_KEY] = oversized.iloc[rows[0]]["prefix"]


if oversized.empty:
    st.success(t("alarm_none", n=MAX_DOCS_PER_CUSTOMER))
else:
    table(oversized, key="memory.alarm", on_select=_open_selected, selection_mode="single-row")

st.subheader(t("drill_title"))
query = st.text_input(t("drill_input"), key=NS_KEY)
if query:
    st.query_params["ns"] = query
    try:
        found = read(reads.find_namespaces, query)
    except InvalidIdentifier as exc:
        st.error(md(exc))
        found = None
    if found is not None and found.empty:
        st.info(t("drill_none", q=md(query)))
    elif found is not None:
        prefix = found["prefix"].iloc[0]
        if len(found) > 1:
            prefix = st.radio(t("drill_pick"), found["prefix"].tolist(), key="memory.pick", horizontal=True,
                              format_func=md_code)
        count = int(found.set_index("prefix").loc[prefix, "documents"])
        pages = max(1, -(-count // PAGE_SIZE))
        page = st.number_input(t("page"), 1, pages, 1, key="memory.page") if pages > 1 else 1
        items = read(reads.namespace_items, prefix, PAGE_SIZE, (page - 1) * PAGE_SIZE)
        items["value"] = items["value"].map(lambda v: json.dumps(v, ensure_ascii=False))
        st.markdown(t("drill_items", prefix=md_code(prefix), n=count))
        table(items, key="memory.items", config={"value": {"width": "large"}})
elif "ns" in st.query_params:
    del st.query_params["ns"]
