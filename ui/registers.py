"""What both register pages share: the button that verifies a register's hash chain."""

from __future__ import annotations

import streamlit as st

from core.privacy import chain
from ui import fmt
from ui.common import call_now
from ui.i18n import t
from ui.safe import md


def verify_button(name: str, key: str) -> None:
    """A "verify" button for chain `name`; shows the outcome (the first broken row, by table and id), kept under the
    button while the page's other buttons rerun it."""
    if st.button(t("chain_verify"), key=key, icon=":material/verified_user:", help=t("chain_help")):
        st.session_state[f"{key}.result"] = call_now(chain.verify, name)
    result = st.session_state.get(f"{key}.result")
    if result is not None:
        if result.ok:
            st.success(t("chain_ok", n=result.links, head=result.head_hash), icon=":material/verified:")
            if result.cut_position:  # the oldest links went with their rows, by the configured retention
                st.caption(t("chain_cut", n=result.cut_position, at=fmt.moment(result.cut_at)))
            if result.redactions:  # what a documented redaction replaced in sealed rows, and when
                rows = "; ".join(
                    f"{md(r.table)} #{r.row_id} ({md(', '.join(r.fields))}) {fmt.moment(r.redacted_at)}"
                    for r in result.redactions
                )
                st.info(t("chain_redacted", rows=rows), icon=":material/ink_eraser:")
        else:
            st.error(
                t(
                    "chain_broken",
                    table=result.table,
                    row=result.row_id,
                    problem=t(f"chain_problem_{result.problem}"),
                    detail=result.detail,
                ),
                icon=":material/gpp_bad:",
            )
