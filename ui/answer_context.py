"""What the agent had in hand when it answered (issue 56, item 1), shared by two pages:
- Checkpoints (SRE), thread view: the thread's answers; pick one (URL `?answer=<checkpoint id>`) and read its
  context: the messages the model was called with, the answer, the memory documents they name with their values
  then and now, each linking to the document on the Memory page;
- Memory (store managers, scoped), a document: the answers that used it, each linking to its context on the
  Checkpoints page, and opening that context on the page itself (a manager has no Checkpoints page).
Reads from core.history.answer_context; layout only."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from core.history import answer_context, tool_calls
from core.history.answer_context import AnswerContext
from core.ids import ThreadId
from core.memory.customer_stores import Scope
from ui import fmt
from ui.checkpoint_diff import kind_label
from ui.common import call_now, read
from ui.i18n import t
from ui.safe import md, md_code
from ui.tables import Link, table

ANSWER_PARAM = "answer"
KIND_AVATAR = {"human": "user", "ai": "assistant", "tool": ":material/build:", "system": ":material/settings:"}


def _text(value) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _calls(calls) -> str:
    """`name(arg = value, ...)` for each call (core.history.tool_calls' words)."""
    if isinstance(calls, str):
        calls = json.loads(calls)
    return "; ".join(
        f"{c.get('name') or '?'}({tool_calls.args_in_words(c, _text)})" for c in calls or [] if isinstance(c, dict)
    )


def _message(msg: dict, position: int | None, answer: bool = False) -> None:
    kind = msg.get("kind") or "ai"
    with st.chat_message(kind, avatar=":material/reply:" if answer else KIND_AVATAR.get(kind)):
        head = f"**{md(t('ctx_answer') if answer else kind_label(kind))}**"
        if position is not None:
            head += f" · {t('ctx_position', n=position + 1)}"
        if msg.get("tool_name") and kind == "tool":
            head += f" · {md_code(msg['tool_name'])}"
        st.markdown(head)
        if _text(msg.get("content")):
            st.text(_text(msg.get("content")))
        if msg.get("tool_calls"):
            st.markdown(t("ckpt_tool_calls", calls=md_code(_calls(msg["tool_calls"]))))


def _documents(docs: pd.DataFrame, key: str) -> None:
    st.markdown(f"**{t('ctx_documents')}**")
    if docs.empty:
        st.caption(t("ctx_no_documents"))
        return
    st.caption(t("ctx_documents_caption"))
    shown = docs.assign(
        via=docs["via"].map(lambda v: t(f"ctx_via_{v}")),
        access=docs["access"].map(lambda v: t(f"ctx_access_{v}")),
        then_how=docs["then_how"].map(lambda v: t(f"ctx_then_{v}")),
        now_state=docs["now_state"].map(lambda v: t(f"ctx_now_{v}")),
        found_by=docs["found_by"].map(lambda v: t(f"ctx_found_{v}") if isinstance(v, str) else t("ctx_not_known")),
        value_then=docs["value_then"].where(docs["then_how"] != "unknown", t("ctx_not_known")),
        position=docs["position"] + 1,
    )
    table(
        shown,
        key=key,
        columns=["prefix", "key", "value_then", "value_now", "then_how", "now_state", "seen", "access", "tool"]
        + ["via", "position", "then_written_at", "updated_at", "expires_at", "found_by", "candidates"],
        links={"prefix": Link("memory", "ns", source="prefix", also=(("key", "key"),))},
        config={
            "prefix": t("ctx_col_document"),
            "tool": t("col_tool"),
            "access": t("ctx_col_access"),
            "via": t("ctx_col_via"),
            "position": t("ctx_col_position"),
            "seen": {"label": t("ctx_col_seen"), "help": t("ctx_col_seen_help")},
            "value_then": {"label": t("ctx_col_then"), "help": t("ctx_col_then_help")},
            "then_how": t("ctx_col_then_how"),
            "then_written_at": t("ctx_col_then_written_at"),
            "value_now": t("ctx_col_now"),
            "now_state": t("ctx_col_now_state"),
            "found_by": {"label": t("ctx_col_found_by"), "help": t("ctx_col_found_by_help")},
            "candidates": t("ctx_col_candidates"),
        },
    )


def context_view(thread_id: ThreadId, checkpoint_id: str, checkpoint_ns: str, key: str) -> AnswerContext | None:
    """The context of one answer, or a note that there is none. `key` names the widgets."""
    call_now(tool_calls.catch_up)  # a document's earlier values are read from the extracted tool calls
    ctx = read(answer_context.context_at, thread_id, checkpoint_id, checkpoint_ns)
    if ctx is None:
        st.info(t("ctx_no_answer", id=md_code(checkpoint_id)))
        return None
    subject = (
        t("ctx_subject", id=md(ctx.subject), source=t(f"ctx_found_{ctx.subject_source}"))
        if ctx.subject
        else t("ctx_subject_unknown")
    )
    when = fmt.moment(ctx.ts) if ctx.ts is not None else "—"
    st.markdown(t("ctx_heading", step=ctx.step, ts=when, n=len(ctx.messages)) + " · " + subject)
    st.caption(t("ctx_prompt_note"))
    if ctx.source is None:
        st.warning(t("ctx_no_messages"), icon=":material/help:")
    elif ctx.source != "stored":
        st.caption(t("ctx_channel_read", how=md(ctx.source)))
    with st.container(border=True, key=f"{key}.messages"):
        for position, msg in enumerate(ctx.messages):
            _message(msg, position)
        for msg in ctx.answer:
            _message({"kind": "ai", **msg}, None, answer=True)
    _documents(ctx.documents, f"{key}.documents")
    return ctx


def thread_answers(thread_id: ThreadId, key: str) -> None:
    """The Checkpoints page's thread view: the thread's answers, and the context of the one picked (its checkpoint
    id in the URL's `answer`)."""
    st.subheader(t("ctx_title"))
    st.caption(t("ctx_caption"))
    found = read(answer_context.answers, thread_id)
    if found.empty:
        st.info(t("ctx_no_answers"))
        st.query_params.pop(ANSWER_PARAM, None)
        return
    wanted = st.query_params.get(ANSWER_PARAM)
    choice = table(
        found.assign(tool_calls=found["tool_calls"].map(lambda c: _calls(c) if isinstance(c, str) else None)),
        key=f"{key}.answers",
        columns=["step", "ts", "content", "tool_calls", "checkpoint_id"],
        config={"content": {"width": "large"}},
        selection_mode="single-row",
        on_select="rerun",
    )
    rows = choice.selection.rows if choice is not None else []
    if rows:
        wanted = found.iloc[rows[0]]["checkpoint_id"]
    if not wanted:
        st.caption(t("ctx_pick"))
        return
    match = found[found["checkpoint_id"] == wanted]
    if match.empty:
        st.info(t("ctx_no_answer", id=md_code(wanted)))
        return
    st.query_params[ANSWER_PARAM] = wanted
    context_view(thread_id, wanted, match["checkpoint_ns"].iloc[0], key=f"{key}.context")


def document_answers(prefix: str, keys: list[str], scope: Scope | None, key: str) -> None:
    """The Memory page's document view: pick one of `keys` of namespace `prefix` (the URL's `key`), the answers that
    used it (limited to `scope`), each linking to its context, and the context of the one picked on this page."""
    if not keys:
        return
    st.subheader(t("ctx_uses_title"))
    st.caption(t("ctx_uses_caption"))
    wanted = st.query_params.get("key")
    doc = st.selectbox(
        t("ctx_document"), keys, index=keys.index(wanted) if wanted in keys else 0, key=f"{key}.document"
    )
    st.query_params["key"] = doc
    call_now(tool_calls.catch_up)  # which conversations called a tool naming it: the extracted tool calls
    uses = read(answer_context.answers_using, prefix, doc, scope=scope)
    if uses.empty:
        st.info(t("ctx_uses_none", doc=md_code(doc)))
        return
    uses = uses.assign(access=uses["access"].map(lambda v: t(f"ctx_access_{v}")), answer=uses["thread_id"])
    choice = table(
        uses,
        key=f"{key}.uses",
        columns=["answer", "step", "ts", "tool", "access"],
        links={"answer": Link("checkpoints", "thread", source="thread_id", also=((ANSWER_PARAM, "checkpoint_id"),))},
        config={"answer": t("ctx_col_answer"), "tool": t("col_tool"), "access": t("ctx_col_access")},
        selection_mode="single-row",
        on_select="rerun",
    )
    rows = choice.selection.rows if choice is not None else []
    if not rows:
        st.caption(t("ctx_uses_pick"))
        return
    use = uses.iloc[rows[0]]
    context_view(ThreadId.parse(use["thread_id"]), use["checkpoint_id"], use["checkpoint_ns"], key=f"{key}.context")
