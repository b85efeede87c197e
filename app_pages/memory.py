"""Memory (store managers): what the agents remember per customer, supplier and employee, the >4 documents
alarm, and one customer's (or supplier's, employee's) memory in detail."""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from core import roles
from core.ids import NamespaceSearch
from core.memory import reads, semantic
from core.memory.customer_stores import ROOT
from core.memory.store import MAX_DOCS_PER_CUSTOMER, POLICIES, InvalidIdentifier
from core.privacy import erasure_register
from core.privacy.data_views import customer_of
from ui import capture, charts, fmt, memory_history
from ui import data_views as views_log
from ui.answer_context import document_answers
from ui.common import (
    call_expensive,
    demo_seeding,
    read,
    require_role,
    root_colors,
    root_label,
    settings,
    shared_figure,
)
from ui.errors import refused_message
from ui.i18n import lang, t
from ui.safe import md, md_code, plot_frame
from ui.scope import manager_scope, scoped_label
from ui.tables import Link, table

TOP_N = 20
PAGE_SIZE = 50
NS_KEY = "memory.ns"
SUGGEST_KEY = "memory.suggest"
SEMANTIC_KEY = "memory.semantic"  # the last search's (root, frame): shown again on reruns, never re-embedded

require_role(roles.MANAGER)
if NS_KEY not in st.session_state:
    st.session_state[NS_KEY] = st.query_params.get("ns", "")


def embeddings_in_words() -> str:
    """The embedding model the store's vectors come from, in the UI's language."""
    cfg = settings()
    if cfg.offline_embeddings:
        return t("emb_offline")
    return t("emb_remote", model=cfg.embeddings_model, url=cfg.embeddings_base_url, dims=cfg.embeddings_dims)


@shared_figure
def by_root_figure(by_root: pd.DataFrame, language: str) -> go.Figure:
    shown = plot_frame(by_root.assign(holder=by_root["root"].map(root_label)))
    fig = px.bar(
        shown,
        x="holder",
        y="documents",
        color="holder",
        color_discrete_map=root_colors(),
        labels={"holder": "", "documents": t("mem_documents")},
    )
    fig.update_traces(texttemplate="%{y:,d}", hovertemplate="%{x}: %{y:,d}<extra></extra>")
    fig.update_layout(showlegend=False, height=320, margin=dict(t=10, b=10))
    return charts.finish(fig)


@shared_figure
def top_figure(top: pd.DataFrame, language: str) -> go.Figure:
    shown = plot_frame(top.assign(holder=top["root"].map(root_label)))
    fig = px.bar(
        shown,
        x="documents",
        y="prefix",
        color="holder",
        orientation="h",
        color_discrete_map=root_colors(),
        labels={"prefix": "", "documents": t("mem_documents"), "holder": ""},
    )  # the legend names the roots
    fig.update_traces(hovertemplate="%{y}: %{x:,d}<extra></extra>")
    # the largest on top, in the order SQL gave, whatever trace (root) each bar belongs to
    fig.update_yaxes(categoryorder="array", categoryarray=shown["prefix"].iloc[::-1].tolist())
    fig.update_layout(
        height=320 + 12 * len(top), margin=dict(t=10, b=10), legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0)
    )
    return charts.finish(fig, counts=("x",))


st.title(t("memory_title"))
st.caption(t("memory_caption"))
capture.freshness_note()  # the totals below are kept by the change follower: how far behind it is
with st.expander(t("mem_technical")):
    st.caption(t("mem_technical_text", emb=md(embeddings_in_words())))
# a store manager's stores (None: every store); every read below is limited to them in SQL
scope = manager_scope()


def mine(label: str) -> str:
    """A total's label, said to be the manager's stores' when the page is scoped."""
    return scoped_label(label, scope)


totals = read(reads.memory_totals, scope=scope)
c1, c2, c3 = st.columns(3)
c1.metric(mine(t("mem_customers")), fmt.number(totals.customers), help=t("mem_customers_help"))
c2.metric(mine(t("mem_documents")), fmt.number(totals.documents))
c3.metric(mine(t("mem_holders")), fmt.number(totals.namespaces), help=t("mem_holders_help"))
c4, c5, _ = st.columns(3)
c4.metric(mine(t("mem_searchable")), fmt.number(totals.vectors), help=t("mem_searchable_help"))
c5.metric(mine(t("mem_expired")), fmt.number(totals.expired), help=t("mem_expired_help"))
if totals.documents == 0:  # empty while the demo seeds is not an empty store: the page says which
    st.info(t("memory_seeding" if demo_seeding() else "memory_empty"), icon=":material/info:")

left, right = st.columns(2)
with left:
    st.subheader(mine(t("mem_by_root")))
    by_root = read(reads.documents_by_root, scope=scope)
    if by_root.empty:
        st.info(t("chart_empty"))
    else:
        charts.draw(by_root_figure(by_root, lang()), key="memory.by_root_chart")
        table(
            by_root.assign(root=by_root["root"].map(root_label)),
            key="memory.by_root",
            config={
                "root": t("mem_holder"),
                "documents": t("mem_documents"),
                "namespaces": t("mem_holders"),
                "expired": t("mem_expired_short"),
            },
        )
with right:
    st.subheader(mine(t("mem_top", n=TOP_N)))
    top = read(reads.top_prefixes, TOP_N, scope=scope)  # most documents first
    if top.empty:
        st.info(t("chart_empty"))
    else:
        charts.draw(top_figure(top, lang()), key="memory.top_chart")

with st.expander(t("mem_policy")):
    st.caption(t("mem_policy_caption"))
    table(
        pd.DataFrame(
            [
                {"root": root_label(p.root), "ttl_days": p.ttl_days, "refresh_on_read": p.refresh_on_read}
                for p in POLICIES.values()
            ]
        ),
        key="memory.policy",
        config={"root": t("mem_holder"), "ttl_days": t("mem_keep_days"), "refresh_on_read": t("mem_refresh")},
    )

st.subheader(mine(t("alarm_title", n=MAX_DOCS_PER_CUSTOMER)))
st.caption(t("alarm_caption", n=MAX_DOCS_PER_CUSTOMER))
oversized = read(reads.oversized_customers, scope=scope)


def _open_selected() -> None:
    rows = st.session_state["memory.alarm"].selection.rows
    if rows:
        st.session_state[NS_KEY] = oversized.iloc[rows[0]]["prefix"]


if oversized.empty:
    st.success(t("alarm_none", n=MAX_DOCS_PER_CUSTOMER))
else:
    # a manager's link opens that customer's memory on this page (ui.tables: a manager's page, never the erasure page)
    table(
        oversized,
        key="memory.alarm",
        on_select=_open_selected,
        selection_mode="single-row",
        columns=["cliente_id", "documents", "keys", "last_write"],
        config={"documents": t("mem_documents"), "keys": t("mem_keys"), "last_write": t("mem_last_write")},
    )

# Below, customers' documents themselves: each look is logged (who looked at a customer's data), with the purpose
# when the configuration asks for one.
purpose = views_log.purpose_input()
least = fmt.number(settings().semantic_min_similarity)  # the least similarity shown (SEMANTIC_MIN_SIMILARITY)
st.subheader(t("sem_title"))
st.caption(t("sem_caption", min=least))
with st.form("memory.semantic_form", border=False):
    q_col, root_col, k_col = st.columns([4, 1.2, 0.8])
    sem_query = q_col.text_input(
        t("sem_query"),
        key="memory.semantic_query",
        placeholder=t("sem_placeholder"),
        max_chars=semantic.MAX_QUERY_LENGTH,
    )
    # the roots in words as options (a format_func runs outside the page in AppTest, always in Spanish);
    # a store manager searches their stores' customers only
    roots = {root_label(r): r for r in ([ROOT] if scope is not None else POLICIES)}
    sem_root = roots[root_col.selectbox(t("sem_root"), list(roots), key="memory.semantic_root")]
    sem_k = k_col.number_input(t("sem_k"), 1, semantic.MAX_K, 10, key="memory.semantic_k")
    if st.form_submit_button(t("sem_search"), icon=":material/manage_search:"):
        st.session_state.pop(SEMANTIC_KEY, None)
        try:
            st.session_state[SEMANTIC_KEY] = (
                sem_root,
                call_expensive(semantic.search, settings(), sem_query, sem_root, int(sem_k), scope=scope),
            )
        except semantic.SearchInputError as exc:
            st.error(md(exc))
        except semantic.EmbeddingUnavailable as exc:
            st.error(
                t("sem_embedding_failed", error=md(exc), emb=md(embeddings_in_words())),
                icon=":material/cloud_off:",
            )
if SEMANTIC_KEY in st.session_state:
    sem_root, hits = st.session_state[SEMANTIC_KEY]
    if hits.empty:
        # nothing at least that similar (a document that shares nothing with the question is no result); no row is
        # shown, so nobody is logged as viewed
        nothing = t("sem_nothing_close", min=least, emb=md(embeddings_in_words()))
        st.info(nothing if totals.vectors else t("sem_no_vectors"), icon=":material/info:")
    elif views_log.allowed(purpose):
        views_log.record(roles.MANAGER, "search", [(p, customer_of(p)) for p in hits["prefix"]], purpose)
        table(
            hits,
            key="memory.semantic_hits",
            columns=["holder", "tipo", "valor", "similarity", "expires_at"],
            links={"holder": Link("memory", "ns", source="prefix", strip=f"{sem_root}.")},
            config={
                "holder": root_label(sem_root),
                "tipo": t("mem_tipo"),
                "valor": {"label": t("mem_value"), "width": "large"},
                "similarity": {"label": t("sem_similarity"), "help": t("sem_similarity_help")},
                "expires_at": t("mem_expires"),
            },
        )
        st.caption(t("sem_explained", min=least, emb=md(embeddings_in_words())))


def _take_suggestion() -> None:
    if st.session_state.get(SUGGEST_KEY):
        st.session_state[NS_KEY] = st.session_state[SUGGEST_KEY]


st.subheader(t("drill_title"))
query = st.text_input(t("drill_input"), key=NS_KEY, placeholder=t("drill_placeholder"))
if query:
    st.query_params["ns"] = query
    try:
        search = NamespaceSearch.parse(query)
    except InvalidIdentifier as exc:
        st.error(refused_message(query, exc))
        found = None
    else:
        found = read(reads.find_namespaces, search, scope=scope)
        suggestions = read(reads.suggest_namespaces, search, scope=scope)
    # an id the register says was erased: said so (when, which request), never "no such namespace"; nothing of the
    # customer is shown, so no view (nor refusal) is logged naming them again
    erased_id = reads.refused_customer(search) if found is not None and found.empty else None
    gone = read(erasure_register.erased, erased_id) if erased_id else None
    if gone is not None:
        st.info(
            t("drill_erased", id=md(erased_id), at=fmt.moment(gone.erased_at), rid=gone.request_id),
            icon=":material/delete_forever:",
        )
    elif found is not None and found.empty and scope is not None:
        # not one of the manager's customers (or no such holder): refused, never shown, and the refusal logged
        st.error(
            t("scope_refused", target=md_code(query), stores=", ".join(map(md, scope.stores))), icon=":material/block:"
        )
        views_log.record(roles.MANAGER, "refused", [(query, reads.refused_customer(search))], purpose or None)
    elif found is not None and found.empty:
        st.info(t("drill_none", q=md(query)))
    if found is not None and not suggestions.empty and suggestions["prefix"].tolist() != found["prefix"].tolist():
        counts = dict(zip(suggestions["prefix"], suggestions["documents"], strict=True))
        st.pills(
            t("drill_suggestions"),
            suggestions["prefix"].tolist(),
            key=SUGGEST_KEY,
            on_change=_take_suggestion,
            format_func=lambda p: f"{md(p)} ({fmt.number(counts[p])})",
        )
    if found is not None and not found.empty and views_log.allowed(purpose):
        prefix = found["prefix"].iloc[0]
        if len(found) > 1:
            prefix = st.radio(
                t("drill_pick"), found["prefix"].tolist(), key="memory.pick", horizontal=True, format_func=md_code
            )
        count = int(found.set_index("prefix").loc[prefix, "documents"])
        pages = max(1, -(-count // PAGE_SIZE))
        page = st.number_input(t("page_of", n=fmt.number(pages)), 1, pages, 1, key="memory.page") if pages > 1 else 1
        views_log.record(roles.MANAGER, "namespace", [(prefix, customer_of(prefix))], purpose)
        items = read(reads.namespace_items, prefix, PAGE_SIZE, (page - 1) * PAGE_SIZE, scope=scope)
        first = (page - 1) * PAGE_SIZE + 1
        st.markdown(
            t(
                "drill_items",
                prefix=md_code(prefix),
                first=fmt.number(first),
                last=fmt.number(first + len(items) - 1),
                n=fmt.number(count),
            )
        )
        table(
            items,
            key="memory.items",
            # what it holds and which conversation wrote it, on screen without scrolling; the technical after
            columns=["key", "tipo", "valor", "thread_id", "expires_at", "ttl_days", "updated_at", "created_at"]
            + ["expired", "vector"],
            config={
                "tipo": t("mem_tipo"),
                "valor": {"label": t("mem_value"), "width": "medium"},
                "expires_at": t("mem_expires"),
                "ttl_days": t("mem_keep_days"),
                "thread_id": t("mem_written_by"),
                "created_at": t("mem_created"),
                "updated_at": t("mem_last_write"),
                "expired": t("mem_is_expired"),
                "vector": t("mem_is_searchable"),
                "key": t("mem_key"),
            },
        )
        if prefix.split(".")[0] == ROOT:  # issue 56: every write of each of the customer's documents
            memory_history.history_section(".".join(prefix.split(".")[:2]), scope)
        document_answers(prefix, items["key"].tolist(), scope, "memory.ctx")  # issue 56: the answers that used one
elif "ns" in st.query_params:
    del st.query_params["ns"]
    st.query_params.pop("key", None)

# Issue 56: memories that need a person's look, counted per store. Last on the page: computed live over every customer
# of the scope (seconds at 1M documents unscoped, BENCHMARKS.md), it must not hold back the search above.
memory_history.flags_section(scope)
