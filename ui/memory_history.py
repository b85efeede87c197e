"""The Memory page's history of a customer's documents and the flags that need a person's look (issue 56, items 2-4).

`history_section(prefix, scope)`: in the customer view, every write of each document (value, when, which
conversation and agent, by which tool), superseded values struck through, when it expires and whether the agent sees
it now. `flags_section(scope)`: the four flags, each with its rule in words and a count per store, then the flagged
documents (no values: opening a customer shows them, and that look is logged). Reads from core.memory.history and
core.memory.flags; layout only."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.memory import flags, history
from core.memory.customer_stores import Scope
from ui import fmt
from ui.common import read, settings
from ui.i18n import t
from ui.safe import md, md_code
from ui.tables import Link, table

SHOWN_DOCUMENTS = 20  # documents whose writes are listed in words; the table below holds every write


def _moment(value) -> str:
    return t("hist_unknown") if value is None or pd.isna(value) else fmt.moment(value)


def _state(doc: history.DocumentState) -> str:
    if doc.state == history.HELD:
        return t("hist_state_held")
    if doc.state == history.EXPIRED:
        return t("hist_state_expired")
    return t("hist_state_swept", at=fmt.moment(doc.swept_at)) if doc.swept_at else t("hist_state_gone")


def _write_line(w: history.HistoryWrite) -> str:
    value = t("hist_value_unknown") if w.value is None else md(w.value)
    shown = f"~~{value}~~" if w.superseded else f"**{value}**"
    parts = [shown, _moment(w.written_at)]
    if w.thread_id:
        held = "" if w.thread_held is not False else " " + t("hist_thread_gone")
        parts.append(t("hist_in_thread", thread=md_code(w.thread_id)) + held)
    if w.agent:
        parts.append(t("hist_by_agent", agent=md(w.agent)))
    parts.append(t("hist_by_tool", tool=md_code(w.tool)) if w.tool else t(f"hist_source_{w.source}"))
    if w.current:
        parts.append(t("hist_current"))
    elif w.superseded:
        parts.append(t("hist_superseded"))
    return "- " + " · ".join(parts)


def history_section(prefix: str, scope: Scope | None) -> None:
    """Every write of each document of the customer whose namespace is `prefix` (a `clientes.<id>` one)."""
    customer = prefix.split(".")[1]
    found = read(history.customer_history, customer, scope=scope)
    st.subheader(t("hist_title"))
    st.caption(t("hist_caption"))
    if found is None:  # not one of the manager's customers: the page refused it above
        return
    for source, error in found.errors.items():
        st.warning(t("hist_source_failed", source=md(source), error=md(error)), icon=":material/warning:")
    if not found.writes:
        st.info(t("hist_none"), icon=":material/info:")
        return
    ordered = sorted(found.documents.items(), key=lambda item: (-len(found.of(*item[0])), item[0]))
    for (doc_prefix, key), doc in ordered[:SHOWN_DOCUMENTS]:
        expired = doc.state == history.EXPIRED
        expiry = (
            t("hist_expired_at" if expired else "hist_expires", at=fmt.moment(doc.expires_at))
            if doc.expires_at is not None
            else ""
        )
        name = md_code(key) if doc_prefix == prefix else f"{md_code(doc_prefix)} / {md_code(key)}"
        st.markdown(f"**{name}** · {_state(doc)}" + (f" · {expiry}" if expiry else ""))
        st.markdown("\n".join(_write_line(w) for w in found.of(doc_prefix, key)))
    if len(ordered) > SHOWN_DOCUMENTS:
        st.caption(t("hist_more", shown=SHOWN_DOCUMENTS, n=fmt.number(len(ordered))))
    with st.expander(t("hist_table")):
        frame = found.frame()
        frame["source"] = frame["source"].map(lambda s: t(f"hist_source_{s}"))
        table(
            frame,
            key="memory.history",
            columns=["key", "written_at", "value", "superseded", "thread_id", "agent", "tool", "source"]
            + ["confirmed_by_log", "state", "expires_at", "visible_to_agent"],
            config={
                "key": t("mem_key"),
                "written_at": t("hist_written_at"),
                "value": {"label": t("mem_value"), "width": "medium"},
                "superseded": t("hist_col_superseded"),
                "thread_id": t("mem_written_by"),
                "agent": t("hist_col_agent"),
                "tool": t("hist_col_tool"),
                "source": t("hist_col_source"),
                "confirmed_by_log": t("hist_col_logged"),
                "state": t("hist_col_state"),
                "expires_at": t("mem_expires"),
                "visible_to_agent": t("hist_col_visible"),
            },
        )


def _rules(th: flags.Thresholds) -> dict[str, str]:
    return {
        "expiring": t("flag_rule_expiring", days=th.expiring_days, used=th.used_days),
        "flapping": t("flag_rule_flapping", k=th.flapping_writes),
        "contradiction": t("flag_rule_contradiction"),
        "provenance_gone": t("flag_rule_provenance_gone"),
    }


FLAG_COLUMNS = {  # the flagged documents' columns of each flag (values are never listed here)
    "expiring": ["cliente_id", "key", "expires_at", "last_used"],
    "flapping": ["cliente_id", "key", "writes"],
    "contradiction": ["cliente_id", "tipo", "writes"],
    "provenance_gone": ["cliente_id", "key", "thread_id", "detail"],
}


def flags_section(scope: Scope | None) -> None:
    """The four flags: rule, count per store, the flagged documents (each customer linking to their memory)."""
    thresholds = flags.Thresholds.from_settings(settings())
    found = read(flags.memory_flags, thresholds, scope=scope)
    st.subheader(t("flag_title"))
    st.caption(t("flag_caption"))
    rules = _rules(thresholds)
    counts = found.counts
    stores = sorted(set(counts["tienda"])) if not counts.empty else []
    per_store = pd.DataFrame(
        [
            {
                "flag": t(f"flag_name_{flag}"),
                "rule": rules[flag],
                "total": found.total(flag),
                **{(s or t("flag_no_store")): found.count(flag, s) for s in stores},
            }
            for flag in flags.FLAGS
        ]
    )
    table(
        per_store,
        key="memory.flags",
        config={
            "flag": t("flag_col_flag"),
            "rule": {"label": t("flag_col_rule"), "width": "large"},
            "total": t("flag_col_total"),
            **{(s or t("flag_no_store")): t("flag_col_store", store=s) if s else t("flag_no_store") for s in stores},
        },
    )
    if found.unattributed_writes:
        st.caption(t("flag_unattributed", n=fmt.number(found.unattributed_writes)))
    tabs = st.tabs([f"{t(f'flag_name_{flag}')} ({fmt.number(found.total(flag))})" for flag in flags.FLAGS])
    for tab, flag in zip(tabs, flags.FLAGS, strict=True):
        with tab:
            st.caption(rules[flag])
            rows = found.rows[found.rows["flag"] == flag].copy()
            if rows.empty:
                st.success(t("flag_none"))
                continue
            rows["prefix"] = "clientes." + rows["cliente_id"]
            rows["detail"] = rows["detail"].map(lambda d: t(f"flag_detail_{d}") if isinstance(d, str) else None)
            if found.total(flag) > len(rows):
                st.caption(t("flag_listed", shown=fmt.number(len(rows)), n=fmt.number(found.total(flag))))
            table(
                rows,
                key=f"memory.flags.{flag}",
                columns=FLAG_COLUMNS[flag],
                links={"cliente_id": Link("memory", "ns", source="prefix", strip="clientes.")},
                config={
                    "cliente_id": t("flag_col_customer"),
                    "key": t("mem_key"),
                    "tipo": t("mem_tipo"),
                    "expires_at": t("mem_expires"),
                    "last_used": t("flag_col_last_used"),
                    "writes": t(f"flag_col_writes_{flag}"),
                    "thread_id": t("mem_written_by"),
                    "detail": t("flag_col_detail"),
                },
            )
