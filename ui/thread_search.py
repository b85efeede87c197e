"""The Checkpoints page's thread search (core/history/thread_search.py): the SRE's two first questions as one
click each, filters by metadata, status, agent and time, sorted and paged with the total. The search lives in the
URL (`?view=search&status=error&window=1h...`): the address bar is the link to share. Layout only."""

from __future__ import annotations

from datetime import timedelta

import streamlit as st

from core.history import thread_search as ts
from core.history import tool_calls
from ui import fmt
from ui.common import call_now, read
from ui.i18n import t
from ui.safe import md
from ui.tables import table

KEY = "checkpoints.search"
# URL parameters of a search (everything else in the URL, e.g. `view` and `lang`, is kept as it is).
PARAMS = ("meta_key", "meta_value", "status", "agent", "window", "from", "to", "sort", "order", "limit", "page")
STATUS_COLOURS = {"interrupted": "#fff3cd", "paused": "#fff3cd", "error": "#f8d7da"}


def _apply(params: dict[str, str]) -> None:
    """Make `params` the URL's search (and the form's values)."""
    for name in PARAMS:
        st.query_params.pop(name, None)
    st.query_params.update(params)
    for name in (*PARAMS, "period"):
        st.session_state.pop(f"{KEY}.{name}", None)


def _preset(name: str) -> None:
    _apply(ts.preset(name).params())


def _form(q: ts.ThreadQuery, agents: list[str]) -> None:
    defaults = {
        "meta_key": q.metadata_key,
        "meta_value": q.metadata_value,
        "status": q.status,
        "agent": q.agent,
        "window": q.window,
        "sort": q.sort,
        "order": q.order,
        "limit": q.limit,
    }
    for name, value in defaults.items():
        st.session_state.setdefault(f"{KEY}.{name}", value)
    with st.form(f"{KEY}.form", border=True):
        c = st.columns(4)
        c[0].text_input(t("search_meta_key"), key=f"{KEY}.meta_key", placeholder="cliente_id")
        c[1].text_input(t("search_meta_value"), key=f"{KEY}.meta_value")
        c[2].selectbox(
            t("search_status"),
            ["", *ts.STATUSES],
            key=f"{KEY}.status",
            format_func=lambda s: t(f"search_status_{s or 'any'}"),
        )
        c[3].selectbox(
            t("search_agent"),
            ["", *sorted(set(agents) | {q.agent} - {""})],
            key=f"{KEY}.agent",
            format_func=lambda a: a or t("search_any"),
        )
        c = st.columns(4)
        c[0].selectbox(
            t("search_window"),
            ["", *ts.WINDOWS],
            key=f"{KEY}.window",
            format_func=lambda w: t(f"search_window_{w or 'any'}"),
        )
        days = (q.since.date(), *([(q.until - timedelta(days=1)).date()] if q.until else [])) if q.since else ()
        # Streamlit types a range as a tuple of fixed length; ours is (), (start,) or (start, end)
        period = c[1].date_input(
            t("search_period", tz=fmt.viewer_timezone()),
            value=days,  # type: ignore[arg-type]
            key=f"{KEY}.period",
            format=fmt.date_input_format(),
        )
        c[2].selectbox(t("search_sort"), list(ts.SORTS), key=f"{KEY}.sort", format_func=lambda s: t(f"col_{s}"))
        c[3].selectbox(
            t("search_order"), list(ts.ORDERS), key=f"{KEY}.order", format_func=lambda o: t(f"search_order_{o}")
        )
        if st.form_submit_button(t("search_submit"), type="primary"):
            chosen = {name: st.session_state[f"{KEY}.{name}"] for name in defaults}
            since, until = (list(period) + [None, None])[:2] if isinstance(period, (list, tuple)) else (None, None)
            params = {
                "meta_key": chosen["meta_key"].strip(),
                "meta_value": chosen["meta_value"].strip(),
                "status": chosen["status"],
                "agent": chosen["agent"],
                "window": chosen["window"],
                "from": since.isoformat() if since else "",
                "to": until.isoformat() if until else "",
                "sort": "" if chosen["sort"] == "updated_at" else chosen["sort"],
                "order": "" if chosen["order"] == "desc" else chosen["order"],
                "limit": "" if chosen["limit"] == 25 else str(chosen["limit"]),
            }
            _apply({k: v for k, v in params.items() if v})
            st.rerun()


def _pager(q: ts.ThreadQuery, found: ts.SearchResult) -> None:
    pages = max(1, -(-found.total // q.limit))  # with a capped total: at least that many
    more = q.page < pages or (found.capped and len(found.threads) == q.limit)
    c = st.columns([1, 1, 3, 2])
    if c[0].button(t("search_previous"), key=f"{KEY}.prev", disabled=q.page <= 1):
        _apply(
            {**q.params(), "page": str(q.page - 1)}
            if q.page > 2
            else {k: v for k, v in q.params().items() if k != "page"}
        )
        st.rerun()
    if c[1].button(t("search_next"), key=f"{KEY}.next", disabled=not more):
        _apply({**q.params(), "page": str(q.page + 1)})
        st.rerun()
    c[2].caption(
        t(
            "search_page",
            page=fmt.number(q.page),
            pages=t("search_more_than", n=fmt.number(pages)) if found.capped else fmt.number(pages),
        )
    )
    size = c[3].selectbox(
        t("search_page_size"), list(ts.PAGE_SIZES), index=ts.PAGE_SIZES.index(q.limit), key=f"{KEY}.limit"
    )
    if size != q.limit:
        _apply(
            {
                **{k: v for k, v in q.params().items() if k not in ("page", "limit")},
                **({} if size == 25 else {"limit": str(size)}),
            }
        )
        st.rerun()


def _status_counts(counts: ts.StatusCounts) -> None:
    """Threads per status, one status each: the five and their total side by side."""
    st.caption(t("search_counts", total=fmt.number(counts.total)))
    c = st.columns(len(ts.STATES) + 1)
    for col, status in zip(c, ts.STATES, strict=False):
        # a short label (six side by side are not cut), the status's full name in its help
        col.metric(t(f"search_count_{status}"), fmt.number(counts.counts[status]), help=t(f"search_status_{status}"))
    c[-1].metric(t("search_counts_total"), fmt.number(counts.total))


def search_view() -> None:
    st.subheader(t("search_title"))
    st.caption(t("search_caption"))
    c = st.columns(3)
    c[0].button(
        t("search_stuck"),
        key=f"{KEY}.stuck",
        icon=":material/pause_circle:",
        on_click=_preset,
        args=("stuck",),
        use_container_width=True,
    )
    c[1].button(
        t("search_failed"),
        key=f"{KEY}.failed",
        icon=":material/error:",
        on_click=_preset,
        args=("failed",),
        use_container_width=True,
    )
    c[2].button(
        t("search_clear"),
        key=f"{KEY}.clear",
        icon=":material/filter_alt_off:",
        on_click=_apply,
        args=({},),
        use_container_width=True,
    )
    try:
        q = ts.ThreadQuery.from_params({k: st.query_params.get(k, "") for k in PARAMS}, fmt.viewer_timezone())
    except ts.BadQuery as exc:
        st.error(t("search_bad", error=md(exc)), icon=":material/block:")
        return
    _form(q, read(ts.agents))
    # the summary is kept by the extraction; a view moves it forward a bounded step (as the Preferences page does)
    extracted = call_now(tool_calls.catch_up)
    _status_counts(read(ts.status_counts))
    found = read(ts.search_threads, q)
    if extracted.error:
        st.warning(t("prefs_cannot_extract", error=md(extracted.error), n=fmt.number(extracted.behind)))
    as_of = "—" if found.as_of is None else fmt.moment(found.as_of)
    behind = t("search_behind", n=fmt.number(extracted.behind)) if extracted.behind else ""
    st.caption(t("search_as_of", at=as_of) + behind)
    st.metric(
        t("search_total"), t("search_more_than", n=fmt.number(found.total)) if found.capped else fmt.number(found.total)
    )
    if found.threads.empty:
        st.info(t("search_none"))
        return
    shown = found.threads.assign(status=found.threads["status"].map(lambda s: t(f"search_status_{s}")))
    colours = {"status": {t(f"search_status_{s}"): c for s, c in STATUS_COLOURS.items()}}
    table(
        shown,
        key=f"{KEY}.results",
        colours=colours,
        config={"metadata": {"width": "large"}, "status": {"label": t("search_status")}},
    )
    _pager(q, found)
    st.caption(t("search_share"))
