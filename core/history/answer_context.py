"""What an agent had in hand when it answered (issue 56, item 1): for one AI message of a thread, the state the model
was called with (the `messages` channel at the checkpoint its task ran from, read by views.checkpoint_values, so a
DeltaChannel is rebuilt as everywhere else, and reduced to chat messages by the canonical SQL decoder
`core_checkpoint_messages`), the memory documents those messages name (core.history.memory_refs) with their value
at that time and now, and the other way round, the answers that used a document.

The system prompt an agent builds at each call (the memory article's and our dynamic prompts read the store there)
is not checkpointed: nobody can say from the database what it held, and the page says so.

A document's namespace id is never in a message. It is, in this order: the checkpoint metadata's customer
(`cliente_id`), our conversation log (core_conversations), the document's own `hilo` back-link to this thread (the
change follower keeps it in core_store_shadow), else, for a read that shows values, the one customer whose documents
hold every value that result shows which any document still holds (core_value_holders); otherwise not known, with
the candidates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pandas as pd

from core.capture.follower import apply_pending
from core.db import Database, one
from core.history import memory_refs, views
from core.history.memory_refs import Reference
from core.ids import InvalidIdentifier, ThreadId
from core.memory import history
from core.memory.customer_stores import MINE, ROOT, Scope

MESSAGES = "messages"  # create_agent's (and any add_messages graph's) conversation channel
ANSWER_COLUMNS = ["step", "ts", "content", "tool_calls", "checkpoint_id", "checkpoint_ns", "message_id"]
DOCUMENT_COLUMNS = [
    "prefix",
    "key",
    "tool",
    "via",
    "access",
    "position",
    "seen",
    "found_by",
    "candidates",
    "value_then",
    "then_how",
    "then_written_at",
    "value_now",
    "updated_at",
    "expires_at",
    "now_state",
]
USES_COLUMNS = ["thread_id", "step", "ts", "tool", "access", "checkpoint_id", "checkpoint_ns"]
MAX_USES = 20  # threads looked into for the answers that used one document, newest first

SELECT_ANSWERS = """
SELECT m.step, m.ts, m.checkpoint_ns, m.checkpoint_id, m.message_id,
       CASE jsonb_typeof(m.content) WHEN 'string' THEN m.content #>> '{}' ELSE m.content::text END AS content,
       m.tool_calls
FROM core_checkpoint_messages_view m
WHERE m.thread_id = %(thread_id)s AND m.channel = 'messages' AND m.kind = 'ai'
ORDER BY m.step, m.ts NULLS LAST, m.checkpoint_id, m.task_id, m.idx, m.position"""

# The checkpoint an answer's task ran from: its time (and the demo's replayed one), step, subject. The same
# expressions as core_checkpoints_view's columns, on the table itself: that view decodes every channel of the row.
SELECT_CHECKPOINT = r"""
SELECT core_try_timestamptz(c.checkpoint ->> 'ts') AS ts,
       CASE WHEN c.metadata ->> 'step' ~ '^-?\d{1,9}$' THEN (c.metadata ->> 'step')::integer END AS step,
       c.metadata ->> 'cliente_id' AS cliente_id, c.metadata ->> 'agente' AS agente,
       core_try_timestamptz(c.metadata ->> 'core_replayed_at') AS replayed_at
FROM checkpoints c
WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(ns)s AND c.checkpoint_id = %(checkpoint_id)s"""

SELECT_NORMALIZED = "SELECT core_checkpoint_messages(%(value)s::jsonb) AS messages"

SELECT_WRITTEN_ANSWER = """
SELECT m.message_id, m.content, m.tool_calls
FROM core_checkpoint_messages_view m
WHERE m.thread_id = %(thread_id)s AND m.checkpoint_ns = %(ns)s AND m.checkpoint_id = %(checkpoint_id)s
  AND m.channel = 'messages' AND m.kind = 'ai'
ORDER BY m.task_id, m.idx, m.position"""

SELECT_CONVERSATION = "SELECT subject_root, subject_id FROM core_conversations WHERE thread_id = %(thread_id)s"

# Documents whose `hilo` names this thread (a primary-key range of ours, core_store_shadow_hilo_idx).
SELECT_BY_HILO = "SELECT prefix, key FROM core_store_shadow WHERE hilo = %(thread_id)s"

# The customers whose documents hold a string value (one hash lookup, core_value_holders' primary key).
# A value more customers hold than MAX_HOLDERS tells nobody apart: it is left out of the intersection.
MAX_HOLDERS = 1000
SELECT_HOLDERS = """
SELECT cliente_id FROM core_value_holders WHERE value_hash = hashtextextended(%(value)s, 0) LIMIT %(limit)s"""

# Documents by primary key, as they are now (no TTL refresh: a read of ours is not the agent's).
SELECT_DOCUMENTS = """
SELECT s.prefix, s.key, s.value, s.updated_at, s.expires_at, (s.expires_at IS NOT NULL AND s.expires_at < now())
       AS expired
FROM unnest(%(prefixes)s::text[], %(keys)s::text[]) AS x(prefix, key)
JOIN store s ON s.prefix = x.prefix AND s.key = x.key"""

# Threads our write log names for a document (core_memory_writes: the agents' own), and those our conversation log
# gives its subject: read where the logs are and passed as an array `%(logged)s` to the reads of the tool calls, kept in
# the dashboard's own database (issue 52: no join across the two).
SELECT_WRITE_LOG_THREADS = """
SELECT DISTINCT thread_id FROM core_memory_writes
WHERE prefix = %(prefix)s AND key = %(key)s AND thread_id IS NOT NULL"""
SELECT_LOGGED_THREADS = """
SELECT thread_id FROM core_conversations WHERE subject_root = %(root)s AND subject_id = %(subject)s
UNION SELECT thread_id FROM core_memory_writes WHERE prefix = %(prefix)s AND key = %(key)s AND thread_id IS NOT NULL"""

# The last write of a document at or before an instant that the tool calls tell (core_tool_calls, same clock as
# `at`), by a thread attributed to the document: its customer's metadata, our write log, or its `hilo`.
SELECT_LAST_WRITE = """
SELECT t.args ->> %(value_arg)s AS value, t.ts, t.thread_id
FROM core_tool_calls t
WHERE t.tool = %(tool)s AND t.args ->> %(key_arg)s = %(part)s AND t.ts <= %(at)s
  AND (t.cliente_id = %(subject)s AND %(root)s = 'clientes'
       OR t.thread_id = ANY(%(logged)s::text[])
       OR t.thread_id IN (SELECT h.hilo FROM core_store_shadow h WHERE h.prefix = %(prefix)s AND h.key = %(key)s))
ORDER BY t.ts DESC LIMIT 1"""

# The threads of a document's subject that called a tool naming it (newest first): its customer's metadata, our
# conversation and write logs, its `hilo` back-link. Each source is an index lookup; the calls by primary key.
SELECT_USES = """
WITH threads AS (
    SELECT thread_id FROM core_tool_calls WHERE cliente_id = %(subject)s AND %(root)s = 'clientes'
    UNION SELECT unnest(%(logged)s::text[])
    UNION SELECT hilo FROM core_store_shadow WHERE prefix = %(prefix)s AND key = %(key)s AND hilo IS NOT NULL
)
SELECT t.thread_id, max(t.ts) AS last_ts
FROM threads JOIN core_tool_calls t ON t.thread_id = threads.thread_id
WHERE t.tool = ANY(%(tools)s::text[]) AND t.thread_id IS NOT NULL
GROUP BY t.thread_id ORDER BY last_ts DESC NULLS LAST, t.thread_id LIMIT %(limit)s"""
# Whether the document's customer is one of the scope's (read where the store mapping is kept).
SELECT_SUBJECT_IN_SCOPE = f"SELECT %(subject)s IN ({MINE}) AS mine"

SELECT_THREAD_MESSAGES = """
SELECT m.checkpoint_ns, m.checkpoint_id, m.step, m.ts, m.kind, m.content, m.tool_calls, m.tool_name, m.tool_call_id
FROM core_checkpoint_messages_view m
WHERE m.thread_id = %(thread_id)s AND m.channel = 'messages'
ORDER BY m.step, m.ts NULLS LAST, m.checkpoint_id, m.task_id, m.idx, m.position"""


@dataclass
class AnswerContext:
    """One answer's context. `messages`: the chat messages the model was called with, in order (the canonical
    decoder's {kind, id, content, tool_calls, tool_name, tool_call_id, status}); `source`: how the channel was read
    (views.checkpoint_values: stored, rebuilt, ...; None when the checkpoint has no messages channel); `answer`: the
    AI message(s) written from that checkpoint; `documents`: a DataFrame of DOCUMENT_COLUMNS."""

    thread_id: str
    checkpoint_id: str
    checkpoint_ns: str
    step: int | None
    ts: datetime | None
    subject: str | None
    subject_source: str | None
    source: str | None
    messages: list[dict[str, Any]] = field(default_factory=list)
    answer: list[dict[str, Any]] = field(default_factory=list)
    documents: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=DOCUMENT_COLUMNS))


def _usable(text: Any) -> bool:
    return isinstance(text, str) and text != "" and "\x00" not in text and len(text) <= 1000


def _calls_text(calls: Any) -> str | None:
    if not isinstance(calls, list) or not calls:
        return None
    return json.dumps(calls, ensure_ascii=False)


def answers(db: Database, thread_id: ThreadId) -> pd.DataFrame:
    """The thread's AI messages (the agent's answers and tool requests), in order, with the checkpoint each was
    written from (ANSWER_COLUMNS; `tool_calls` as JSON text)."""
    df = pd.DataFrame(db.fetch(SELECT_ANSWERS, {"thread_id": thread_id}), columns=ANSWER_COLUMNS)
    df["tool_calls"] = df["tool_calls"].map(_calls_text)
    return df


def document_value(value: Any) -> str | None:
    """A document's value as a person reads it: its `valor`, else its `texto`, else the JSON."""
    if not isinstance(value, dict):
        return None if value is None else json.dumps(value, ensure_ascii=False)
    for name in ("valor", "texto"):
        if isinstance(value.get(name), str):
            return value[name]
    return json.dumps(value, ensure_ascii=False)


def _subject(db: Database, thread_id: str, cliente_id: Any) -> tuple[dict[str, str], str | None]:
    """{root: id} of the thread's subject and the source that said so."""
    if isinstance(cliente_id, str) and cliente_id:
        return {ROOT: cliente_id}, "metadata"
    row = db.fetch_one(SELECT_CONVERSATION, {"thread_id": thread_id})
    if row is not None:
        return {row["subject_root"]: row["subject_id"]}, "conversations"
    return {}, None


def _by_value(db: Database, refs: list[Reference]) -> list[str]:
    """The customers whose documents hold every value these references show that any document still holds (a value
    overwritten since, or one more than MAX_HOLDERS customers hold, is no evidence either way), sorted."""
    holders: set[str] | None = None
    for ref in refs:
        if ref.value is None:
            continue
        holding = db.ours.fetch(SELECT_HOLDERS, {"value": ref.value, "limit": MAX_HOLDERS + 1})
        found = {r["cliente_id"] for r in holding}
        if found and len(found) <= MAX_HOLDERS:
            holders = found if holders is None else holders & found
    return sorted(holders or ())


Placed = tuple[str | None, str | None, list[str]]


def _place(
    db: Database, thread_id: str, refs: list[Reference], subject: dict[str, str], subject_source: str | None
) -> list[Placed]:
    """For each reference: (prefix or None, found_by, candidates)."""
    hilo: set[tuple[str, str]] | None = None
    by_position: dict[int, list[str]] = {}
    out: list[Placed] = []
    for ref in refs:
        if ref.root in subject:
            out.append((f"{ref.root}.{subject[ref.root]}", subject_source, []))
            continue
        if hilo is None:  # read only when a message's subject is not recorded: the follower's, brought up to date
            apply_pending(db.dsn)
            hilo = {(r["prefix"], r["key"]) for r in db.ours.fetch(SELECT_BY_HILO, {"thread_id": thread_id})}
        linked = sorted(p for p, k in hilo if k == ref.key and p.startswith(ref.root + "."))
        if len(linked) == 1:
            out.append((linked[0], "hilo", []))
            continue
        if ref.root == ROOT and ref.via == "result":
            if ref.position not in by_position:
                by_position[ref.position] = _by_value(db, [r for r in refs if r.position == ref.position])
            found = by_position[ref.position]
            if len(found) == 1:
                out.append((f"{ROOT}.{found[0]}", "value", []))
                continue
            out.append((None, None, [f"{ROOT}.{c}" for c in found]))
            continue
        out.append((None, None, linked))
    return out


def _value_then(
    db: Database,
    ref: Reference,
    prefix: str,
    now: dict | None,
    checkpoint_ts: Any,
    at: Any,
    histories: dict[str, history.CustomerHistory | None],
) -> tuple[str | None, str, Any]:
    """The document's value when the answer was made, how that is known and when it was written: `result` (the tool's
    result shows the value it read), `history` (a customer's document: the latest known write at or before it,
    core.memory.history.value_at), `unchanged` (its current version was written before that step), `write` (the last
    write the tool calls tell, at or before it), else `unknown`."""
    if ref.via == "result" and ref.value is not None:
        return ref.value, "result", None
    if prefix.startswith(ROOT + ".") and at is not None:
        customer = prefix.split(".")[1]
        try:
            if customer not in histories:
                histories[customer] = history.customer_history(db, customer)
            then = history.value_at(db, prefix, ref.key, at, history=histories[customer])
        except InvalidIdentifier:  # an id the agents wrote that no parsed id can be: its history is not read
            return None, "unknown", None
        return (then.value, "history", then.written_at) if then.known else (None, "unknown", None)
    if now is not None and checkpoint_ts is not None and now["updated_at"] <= checkpoint_ts:
        return document_value(now["value"]), "unchanged", now["updated_at"]
    writers = memory_refs.WRITERS.items()
    writer = next((w for w in writers if w[1][0] == ref.root and ref.key.startswith(w[1][1][:-2])), None)
    if writer is not None and at is not None:
        tool, (root, template, key_arg, value_arg) = writer
        part = ref.key.removeprefix(template[:-2])
        logged = [r["thread_id"] for r in db.fetch(SELECT_WRITE_LOG_THREADS, {"prefix": prefix, "key": ref.key})]
        row = db.ours.fetch_one(
            SELECT_LAST_WRITE,
            {
                "logged": logged,
                "tool": tool,
                "key_arg": key_arg,
                "value_arg": value_arg,
                "part": part,
                "at": at,
                "subject": prefix.split(".", 1)[1],
                "root": root,
                "prefix": prefix,
                "key": ref.key,
            },
        )
        if row is not None and row["value"] is not None:
            return row["value"], "write", row["ts"]
    return None, "unknown", None


def _documents(db: Database, thread_id: str, messages: list[dict], cp: dict, cliente_id: Any) -> pd.DataFrame:
    refs = memory_refs.references(messages)
    if not refs:
        return pd.DataFrame(columns=DOCUMENT_COLUMNS)
    subject, subject_source = _subject(db, thread_id, cliente_id)
    placed = _place(db, thread_id, refs, subject, subject_source)
    pairs = [(p, r.key) for r, (p, _, _) in zip(refs, placed, strict=True) if p]
    rows = db.fetch(SELECT_DOCUMENTS, {"prefixes": [p for p, _ in pairs], "keys": [k for _, k in pairs]})
    now = {(r["prefix"], r["key"]): r for r in rows}
    at = cp["replayed_at"] or cp["ts"]
    histories: dict[str, history.CustomerHistory | None] = {}
    out = []
    for ref, (prefix, found_by, candidates) in zip(refs, placed, strict=True):
        doc = now.get((prefix, ref.key)) if prefix else None
        if prefix:
            then, how, written_at = _value_then(db, ref, prefix, doc, cp["ts"], at, histories)
            state = "absent" if doc is None else "expired" if doc["expired"] else "present"
        else:
            then, how, written_at, state = None, "unknown", None, "unknown"
        out.append(
            {
                "prefix": prefix,
                "key": ref.key,
                "tool": ref.tool,
                "via": ref.via,
                "access": ref.access,
                "position": ref.position,
                "seen": ref.value,
                "found_by": found_by,
                "candidates": ", ".join(candidates) or None,
                "value_then": then,
                "then_how": how,
                "then_written_at": written_at,
                "value_now": document_value(doc["value"]) if doc else None,
                "updated_at": doc["updated_at"] if doc else None,
                "expires_at": doc["expires_at"] if doc else None,
                "now_state": state,
            }
        )
    return pd.DataFrame(out, columns=DOCUMENT_COLUMNS)


def context_at(db: Database, thread_id: ThreadId, checkpoint_id: str, checkpoint_ns: str = "") -> AnswerContext | None:
    """The context of the answer written from checkpoint `checkpoint_id` of `thread_id`: the messages the model was
    called with, the answer, and the documents they name with their values then and now. None when that checkpoint
    is not in that thread (or the id cannot be one)."""
    if not _usable(checkpoint_id) or not isinstance(checkpoint_ns, str) or "\x00" in checkpoint_ns:
        return None
    key = {"thread_id": thread_id, "ns": checkpoint_ns, "checkpoint_id": checkpoint_id}
    cp = db.fetch_one(SELECT_CHECKPOINT, key)
    if cp is None:
        return None
    values = views.checkpoint_values(db, thread_id, checkpoint_id, checkpoint_ns)
    row = values[values["channel"] == MESSAGES]
    messages: list[dict[str, Any]] = []
    source = None
    if not row.empty and isinstance(row["value"].iloc[0], str):
        source = row["source"].iloc[0]
        normalized = db.fetch_one(SELECT_NORMALIZED, {"value": row["value"].iloc[0]})
        messages = list((normalized or {}).get("messages") or [])
    answer = [
        {"id": r["message_id"], "content": r["content"], "tool_calls": r["tool_calls"]}
        for r in db.fetch(SELECT_WRITTEN_ANSWER, key)
    ]
    subject, subject_source = _subject(db, thread_id, cp["cliente_id"])
    return AnswerContext(
        thread_id=thread_id,
        checkpoint_id=checkpoint_id,
        checkpoint_ns=checkpoint_ns,
        step=cp["step"],
        ts=cp["ts"],
        subject=next(iter(subject.values()), None),
        subject_source=subject_source,
        source=source,
        messages=messages,
        answer=answer,
        documents=_documents(db, thread_id, messages, cp, cp["cliente_id"]),
    )


def _uses_in_thread(rows: list[dict], key: str) -> list[dict]:
    """In one thread's messages (SELECT_THREAD_MESSAGES rows), the first answer after each mention of `key`: the AI
    message whose context first holds the tool call or result naming it."""
    fields = ("kind", "content", "tool_calls", "tool_name", "tool_call_id")
    messages = [{k: r[k] for k in fields} for r in rows]
    out = []
    for ref in memory_refs.references(messages):
        if ref.key != key:
            continue
        after = next(
            (r for r in rows[ref.position + 1 :] if r["kind"] == "ai" and r["step"] > rows[ref.position]["step"]),
            None,
        )
        if after is not None:
            out.append({**after, "tool": ref.tool, "access": ref.access})
    return out


def answers_using(db: Database, prefix: str, key: str, scope: Scope | None = None) -> pd.DataFrame:
    """The answers whose context held a tool call or result naming document (`prefix`, `key`): per thread of the
    document's subject (metadata, our logs, its `hilo`) among the MAX_USES threads that called a tool naming such a
    document last, the first AI message after each mention (USES_COLUMNS). A thread whose subject nobody recorded is
    not found here (the memory article's reads: the page says so). With a `scope`, nothing unless the document is
    one of the scope's customers'."""
    if not (_usable(prefix) and _usable(key)) or "." not in prefix:
        return pd.DataFrame(columns=USES_COLUMNS)
    root, subject = prefix.split(".", 1)
    tools = [t for t, w in memory_refs.WRITERS.items() if w[0] == root]
    tools += [t for t, w in memory_refs.KEY_READERS.items() if w[0] == root]
    tools += [t for t, w in memory_refs.LIST_READERS.items() if w[0] == root]
    params: dict[str, Any] = {"root": root, "subject": subject, "prefix": prefix, "key": key, "tools": tools}
    params["limit"] = MAX_USES
    if scope is not None:
        if root != ROOT:
            return pd.DataFrame(columns=USES_COLUMNS)
        if not one(db.ours.fetch_one(SELECT_SUBJECT_IN_SCOPE, {"subject": subject, **scope.params()}))["mine"]:
            return pd.DataFrame(columns=USES_COLUMNS)
    params["logged"] = [r["thread_id"] for r in db.fetch(SELECT_LOGGED_THREADS, params)]
    threads = db.ours.fetch(SELECT_USES, params)
    out = []
    for t in threads:
        rows = db.fetch(SELECT_THREAD_MESSAGES, {"thread_id": t["thread_id"]})
        for use in _uses_in_thread(rows, key):
            out.append({"thread_id": t["thread_id"], **{c: use[c] for c in USES_COLUMNS if c != "thread_id"}})
    df = pd.DataFrame(out, columns=USES_COLUMNS).drop_duplicates(["thread_id", "checkpoint_id"])
    return df.sort_values(["ts", "thread_id"], ascending=[False, True], na_position="last").reset_index(drop=True)
