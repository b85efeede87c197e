"""Access (DPO, GDPR art. 15): customer id -> counts per source -> export (JSON or readable HTML, es/en).

The export is generated only when the DPO clicks the download button (a callable passed to
st.download_button), registered with its sha256 and never cached server-side: no st.cache_data, and
only the counts (no personal data) stay in the session.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from agent_memory_runtime import clock
from core import roles
from core.memory.store import InvalidIdentifier
from core.privacy import access, access_notice, data_views
from ui import data_views as views_log
from ui.common import call_expensive, call_now, get_db, require_role
from ui.errors import refused_message
from ui.fmt import moment
from ui.i18n import LANGUAGES, lang, t
from ui.safe import md, md_code
from ui.tables import table

ID_KEY = "access.customer"
SUMMARY_KEY = "access.summary"
FORMAT_KEY = "access.format"
LANG_KEY = "access.lang"
EXPORTS_SEEN_KEY = "access.exports_seen"  # per customer: the newest register row this session has shown
EXPORT_POLL_S = 2.0  # how often the list of exports looks for the one a download just registered

user = require_role(roles.DPO)
operator = user.email or "local"
if ID_KEY not in st.session_state:
    st.session_state[ID_KEY] = st.query_params.get("cliente", "")


@dataclass(frozen=True)
class Summary:
    """What the page keeps between runs: counts only, never the customer's data."""

    customer_id: str
    prefix: str
    counts: dict[str, int]
    empty: bool
    unattributed: int
    sources: dict[str, list[str]]
    read_at: str


def read_summary(customer_id: str) -> Summary | None:
    try:
        report = call_expensive(access.gather, customer_id)
    except InvalidIdentifier as exc:
        st.error(refused_message(customer_id, exc))
        return None
    return Summary(
        report.customer_id,
        report.namespace_prefix,
        report.counts,
        report.empty,
        report.unattributed_threads,
        report.sources,
        moment(clock.now()),
    )


st.title(t("access_title"))
st.caption(t("access_caption"))

customer_id = st.text_input(t("access_customer"), key=ID_KEY)
if customer_id:
    st.query_params["cliente"] = customer_id
elif "cliente" in st.query_params:
    del st.query_params["cliente"]

summary: Summary | None = st.session_state.get(SUMMARY_KEY)
refresh = st.button(t("access_preview"), key="access.preview", icon=":material/preview:", disabled=not customer_id)
if customer_id and (refresh or summary is None or summary.customer_id != customer_id):
    summary = read_summary(customer_id)
    st.session_state[SUMMARY_KEY] = summary
if not customer_id or summary is None or summary.customer_id != customer_id:
    st.stop()
purpose = views_log.purpose_input()
if not views_log.allowed(purpose):
    st.stop()
views_log.record(roles.DPO, "access_preview", [(f"art15:{summary.customer_id}", summary.customer_id)], purpose)

st.subheader(t("access_counts_title", prefix=md_code(summary.prefix)))
st.caption(t("access_read_at", at=summary.read_at))
left, right = st.columns([1, 1])
with left:
    st.dataframe(
        pd.DataFrame(
            {
                t("access_source"): [t(f"access_count_{k}") for k in summary.counts],
                t("access_items"): list(summary.counts.values()),
            }
        ),
        hide_index=True,
        key="access.counts",
        height=35 * (len(summary.counts) + 1) + 3,
    )
with right:
    st.markdown(f"**{t('access_sources')}**")
    for kind, names in summary.sources.items():
        st.caption(f"{t(f'access_sources_{kind}')}: " + ", ".join(md_code(n) for n in names))
if summary.empty:
    st.info(t("access_nothing", id=md(summary.customer_id)))
st.warning(t("access_caveat", n=summary.unattributed), icon=":material/visibility_off:")

if FORMAT_KEY not in st.session_state:
    st.session_state[FORMAT_KEY] = "json"
if st.session_state.get(LANG_KEY) not in LANGUAGES:
    st.session_state[LANG_KEY] = lang()
c1, c2 = st.columns([2, 1])
fmt = c1.radio(
    t("access_format"),
    list(access.FORMATS),
    key=FORMAT_KEY,
    horizontal=True,
    format_func=lambda f: t(f"access_format_{f}"),
)
doc_lang = c2.selectbox(t("access_lang"), list(LANGUAGES), format_func=LANGUAGES.get, key=LANG_KEY)


try:
    _, _, configured = access_notice.texts(doc_lang)
except access_notice.NoticeConfigError as exc:  # the export would fail: say why, offer nothing
    st.error(t("access_notice_broken", error=md(exc)))
    st.stop()
if not configured:
    st.warning(t("access_notice_defaults"), icon=":material/edit_note:")


def make_export(
    cid: str = summary.customer_id, fmt: str = fmt, doc_lang: str = doc_lang, purpose: str | None = purpose
) -> bytes:
    # runs when the button is clicked, outside the page script: no Streamlit calls, nothing cached
    done = access.export(get_db(), cid, fmt=fmt, lang=doc_lang, operator=operator)
    # who looked: the export names its access-register row (queued; a view that cannot be is counted by core)
    data_views.record(
        get_db(),
        [data_views.View(operator, roles.DPO, "access_export", f"access_register:{done.register_id}", cid, purpose)],
    )
    return done.data


safe_id = re.sub(r"[^A-Za-z0-9_-]", "_", summary.customer_id)
# The click does not rerun the page (on_click="ignore"): a rerun racing the browser's request for the file dropped
# the callable the button named, and a second export after a format change did nothing (issue 54 #1). The list
# below sees the new export's register row and then reads the page again (counts included). The label names the
# format and language of the file it makes: a click before a changed choice's run has drawn the new button gets
# the file the button on screen named (Streamlit keeps the previous run's callable until the new one replaces it).
st.download_button(
    t("access_download", format=fmt.upper(), lang=LANGUAGES[doc_lang]),
    data=make_export,
    file_name=f"acceso-{safe_id}-{time.strftime('%Y%m%d')}.{fmt}",
    mime="application/json" if fmt == "json" else "text/html",
    key="access.download",
    type="primary",
    icon=":material/download:",
    help=t("access_download_help"),
    on_click="ignore",
)


@st.fragment(run_every=EXPORT_POLL_S)
def export_list(cid: str) -> None:
    """The customer's registered exports; a new one (an export just downloaded) reads the whole page again, so the
    counts show it too. A fragment's run keeps the download button's file: the button stays usable meanwhile."""
    exports = call_now(access.register, 20, cid)
    newest = 0 if exports.empty else int(exports["id"].iloc[0])
    known = st.session_state.setdefault(EXPORTS_SEEN_KEY, {}).setdefault(cid, newest)
    if newest > known:
        st.session_state[EXPORTS_SEEN_KEY][cid] = newest
        st.session_state.pop(SUMMARY_KEY, None)
        st.rerun(scope="app")
    if exports.empty:
        return
    st.subheader(t("access_exports_of", id=md(cid)))
    table(
        exports,
        key="access.exports",
        columns=["id", "exported_at", "operator", "format", "lang", "size_bytes", "sha256"],
        config={
            "id": "#",
            "exported_at": t("access_col_at"),
            "operator": t("access_col_operator"),
            "format": t("access_col_format"),
            "lang": t("access_col_lang"),
            "size_bytes": t("access_col_size"),
            "sha256": "sha256",
        },
    )


export_list(summary.customer_id)
st.page_link("app_pages/access_register.py", label=t("access_to_register"), icon=":material/receipt_long:")
