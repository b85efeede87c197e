"""The Checkpoints page's diff between two checkpoints of a thread: which channels changed, in words of the UI's
language, and for a channel of chat messages (`messages`, any add_messages channel) the messages added, removed
and changed, each with its kind and a preview, instead of two lists of JSON side by side."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.history import views
from core.history.message_diff import MessageDiff
from core.ids import ThreadId
from ui import fmt
from ui.common import read
from ui.i18n import t
from ui.safe import md_code
from ui.tables import table

CHANGED = ("added", "removed", "changed")
MESSAGE_KINDS = ("human", "ai", "tool", "system")


def change_label(change: str) -> str:
    return t(f"ckpt_change_{change}")


def kind_label(kind: str) -> str:
    return t(f"ckpt_kind_{kind}") if kind in MESSAGE_KINDS else kind


def _channels_shown(changes: pd.DataFrame, messages: dict[str, MessageDiff]) -> pd.DataFrame:
    """The channels' table: the change in words; a message channel's values as message counts (its messages
    are listed below the table)."""
    shown = changes.assign(change=changes["change"].map(change_label))
    for channel, found in messages.items():
        row = shown["channel"] == channel
        shown.loc[row, "old_value"] = fmt.count("ckpt_n_messages", found.old_count)
        shown.loc[row, "new_value"] = fmt.count("ckpt_n_messages", found.new_count)
    return shown


def message_changes(channel: str, found: MessageDiff, key: str) -> None:
    st.markdown(
        t(
            "ckpt_diff_messages",
            channel=md_code(channel),
            added=fmt.count("ckpt_n_added", found.count("added")),
            removed=fmt.count("ckpt_n_removed", found.count("removed")),
            changed=fmt.count("ckpt_n_changed", found.count("changed")),
        )
    )
    if found.changes.empty:
        return
    frame = found.changes.assign(
        change=found.changes["change"].map(change_label), kind=found.changes["kind"].map(kind_label)
    )
    before = found.count("removed") + found.count("changed")  # a side only added (or only removed) messages lack
    after = found.count("added") + found.count("changed")
    columns = [
        "change",
        "position",
        "kind",
        *(["old_content"] if before else []),
        *(["new_content"] if after else []),
        *(["fields"] if found.count("changed") else []),
        "message_id",
    ]
    table(
        frame, key=key, columns=columns, config={"old_content": {"width": "large"}, "new_content": {"width": "large"}}
    )


def diff_view(thread_id: ThreadId, timeline: pd.DataFrame, label) -> None:
    """Two checkpoints of the thread (`timeline`'s, named by `label(row)`), the older and newer last ones first."""
    st.subheader(t("ckpt_diff"))
    if len(timeline) < 2:
        st.info(t("ckpt_diff_need_two"))
        return
    labels = {row.checkpoint_id: label(row) for row in timeline.itertuples()}
    ids = list(labels)
    left, right = st.columns(2)
    old = left.selectbox(
        t("ckpt_diff_old"), ids, index=len(ids) - 2, key="checkpoints.diff_old", format_func=labels.__getitem__
    )
    new = right.selectbox(
        t("ckpt_diff_new"), ids, index=len(ids) - 1, key="checkpoints.diff_new", format_func=labels.__getitem__
    )
    only_changes = st.toggle(t("ckpt_diff_only_changes"), value=True, key="checkpoints.diff_changes")
    ns = timeline.loc[timeline["checkpoint_id"] == new, "checkpoint_ns"].iloc[0]
    changes = read(views.checkpoint_diff, thread_id, old, new, ns)
    changed = changes[changes["change"].isin(CHANGED)]
    st.caption(
        t(
            "ckpt_diff_summary",
            changed=fmt.count("ckpt_n_channels_changed", len(changed)),
            total=fmt.number(len(changes)),
        )
    )
    messages = views.message_diffs(changes)
    table(
        _channels_shown(changed if only_changes else changes, messages),
        key="checkpoints.diff",
        columns=["channel", "change", "old_value", "new_value", "old_version", "new_version"],
        config={"old_value": {"width": "large"}, "new_value": {"width": "large"}},
    )
    for channel, found in messages.items():
        message_changes(channel, found, key=f"checkpoints.diff_messages.{channel}")
