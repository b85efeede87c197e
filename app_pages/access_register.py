"""Access register (DPO): every export, who made it, of whom, when, and the sha256 of the file; and who looked at a
customer's data on this dashboard (core.privacy.data_views), filterable by customer; chain verification of both."""

from __future__ import annotations

import streamlit as st

from core import roles
from core.memory.store import InvalidIdentifier
from core.privacy import access, data_views
from ui import fmt
from ui.common import call_now, require_role, settings
from ui.errors import refused_message
from ui.i18n import t
from ui.registers import verify_button
from ui.safe import md, md_code
from ui.tables import table

require_role(roles.DPO)

st.title(t("access_register_title"))
st.caption(t("access_register_caption"))
exports_tab, views_tab = st.tabs([t("access_register_exports"), t("views_title")])

with exports_tab:
    verify_button("access", key="access_register.verify")
    exports = call_now(access.register)
    if exports.empty:
        st.info(t("access_register_empty"))
    else:
        table(
            exports,
            key="access_register.table",
            columns=["id", "customer_id", "operator", "exported_at", "format", "lang", "items", "size_bytes", "sha256"],
            config={
                "id": "#",
                "customer_id": t("access_col_customer"),
                "operator": t("access_col_operator"),
                "exported_at": t("access_col_at"),
                "format": t("access_col_format"),
                "lang": t("access_col_lang"),
                "items": t("access_col_items"),
                "size_bytes": t("access_col_size"),
                "sha256": "sha256",
            },
        )

with views_tab:
    cfg = settings()
    st.caption(
        t(
            "views_caption",
            days=cfg.data_views_retention_days,
            purpose=t("views_purpose_on") if cfg.data_views_purpose else t("views_purpose_off"),
        )
    )
    missing = call_now(data_views.unrecorded)
    if missing.views:
        st.warning(
            t("views_unrecorded", n=fmt.number(missing.views), since=fmt.moment(missing.since)),
            icon=":material/report:",
        )
    for crash in missing.crashes:
        st.warning(
            t(
                "views_lost_by_process",
                process=md_code(crash.process),
                since=fmt.moment(crash.since),
                until=fmt.moment(crash.until),
            ),
            icon=":material/report:",
        )
    if missing.waiting:
        st.warning(
            t(
                "views_waiting",
                n=fmt.number(missing.waiting),
                since=fmt.moment(missing.waiting_since),
                error=md(missing.error or "—"),
            ),
            icon=":material/hourglass_top:",
        )
    verify_button("views", key="access_register.verify_views")
    customer = st.text_input(
        t("views_filter"), key="access_register.views_customer", placeholder=t("views_filter_placeholder")
    ).strip()
    try:
        seen = call_now(data_views.customer_views, customer) if customer else call_now(data_views.views)
    except InvalidIdentifier as exc:
        st.error(refused_message(customer, exc))
        st.stop()
    if seen.empty:
        st.info(t("views_none_of", id=md(customer)) if customer else t("views_none"))
    else:
        table(
            seen.assign(kind=seen["kind"].map(lambda k: t(f"views_kind_{k}"))),
            key="access_register.views",
            columns=["viewed_at", "viewer", "role", "kind", "customer_id", "target", "purpose", "id"],
            config={
                "viewed_at": t("views_col_at"),
                "viewer": t("views_col_viewer"),
                "role": t("views_col_role"),
                "kind": t("views_col_kind"),
                "customer_id": t("access_col_customer"),
                "target": {"label": t("views_col_target"), "width": "large"},
                "purpose": t("views_col_purpose"),
                "id": "#",
            },
        )
