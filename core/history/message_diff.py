"""What changed in a list of chat messages between two checkpoints (a `messages` channel, or any channel an
add_messages reducer keeps): the messages added, removed and changed, matched by message id (by position when a
message has none), each with its kind and a preview of its content. Pure: works on decoded channel values."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pandas as pd

from core.history.formats import messages_of

PREVIEW_CHARS = 160
CHANGE_COLUMNS = ["change", "position", "kind", "message_id", "fields", "old_content", "new_content"]
# fields of a decoded message that say nothing a reader looks for when they alone differ
QUIET_FIELDS = frozenset({"additional_kwargs", "response_metadata", "usage_metadata"})


@dataclass(frozen=True)
class MessageDiff:
    old_count: int
    new_count: int
    changes: pd.DataFrame  # CHANGE_COLUMNS: added and changed in the newer list's order, then the removed

    def count(self, change: str) -> int:
        return int((self.changes["change"] == change).sum())


def _message_list(value: Any) -> list[dict] | None:
    """The raw message objects of a channel value: [] for no value, None when it is not a list of messages."""
    if value is None:
        return []
    if not isinstance(value, list) or len(messages_of(value)) != len(value):
        return None
    return value


def _body(raw: dict) -> dict:
    return raw["value"] if isinstance(raw.get("value"), dict) else raw


def _key(raw: dict, position: int) -> str:
    message_id = _body(raw).get("id")
    return str(message_id) if message_id not in (None, "") else f"#{position}"


def preview(raw: dict) -> str:
    """A message's text as a reader scans it: its content (text blocks joined), then its tool calls
    `name(args)`, cut at PREVIEW_CHARS."""
    reduced = messages_of([raw])[0]
    content = reduced.get("content")
    if isinstance(content, list):
        content = " ".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    parts = [content] if isinstance(content, str) and content else [] if content in (None, "") else [str(content)]
    for call in reduced.get("tool_calls") or []:
        parts.append(f"{call.get('name')}({json.dumps(call.get('args'), ensure_ascii=False)})")
    text = " · ".join(parts)
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def message_diff(old: Any, new: Any) -> MessageDiff | None:
    """The messages added, removed and changed from `old` to `new` (decoded channel values); None unless
    both are lists of chat messages (or absent) and one of them holds at least one."""
    a, b = _message_list(old), _message_list(new)
    if a is None or b is None or not (a or b):
        return None
    before = {_key(m, i): m for i, m in enumerate(a)}
    after = {_key(m, i): m for i, m in enumerate(b)}
    rows = []
    for i, (key, m) in enumerate(after.items()):
        kind = messages_of([m])[0]["kind"]
        if key not in before:
            rows.append(["added", i + 1, kind, key, "", None, preview(m)])
        elif before[key] != m:
            old_body, new_body = _body(before[key]), _body(m)
            fields = sorted(k for k in set(old_body) | set(new_body) if old_body.get(k) != new_body.get(k))
            shown = [f for f in fields if f not in QUIET_FIELDS] or fields
            rows.append(["changed", i + 1, kind, key, ", ".join(shown), preview(before[key]), preview(m)])
    for i, (key, m) in enumerate(before.items()):
        if key not in after:
            rows.append(["removed", i + 1, messages_of([m])[0]["kind"], key, "", preview(m), None])
    frame = pd.DataFrame(rows, columns=CHANGE_COLUMNS)
    return MessageDiff(len(a), len(b), frame)
