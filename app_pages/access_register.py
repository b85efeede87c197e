"""Access register (DPO): every export, who made it, of whom, when, and the sha256 of the file; chain verification."""
from __future__ import annotations

import streamlit as st

from core import roles
from core.privacy import access
from ui.common import call_now, require_role
from ui.i18n import t
from ui.registers import verify_button

require_role(roles.DPO)

st.title(t("access_register_title"))
st.caption(t("access_register_caption"))
verify_button("access", key="access_register.verify")

exports = call_now(access.register)
if exports.empty:
    st.info(t("access_register_empty"))
    st.stop()
st.dataframe(
    exports[["id", "customer_id", "operator", "exported_at", "format", "lang", "items", "size_bytes", "sha256"]],
    hide_index=True, key="access_register.table",
    column_config={
        "id": st.column_config.NumberColumn("#", format="%d"),
        "customer_id": t("access_col_customer"), "operator": t("access_col_operator"),
        "exported_at": st.column_config.DatetimeColumn(t("access_col_at"), format="YYYY-MM-DD HH:mm:ss z"),
        "format": t("access_col_format"), "lang": t("access_col_lang"), "items": t("access_col_items"),
        "size_bytes": t("access_col_size"), "sha256": "sha256",
    },
)
