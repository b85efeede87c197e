"""Read side of the Checkpoints page: threads, their timeline, each step's writes, a diff between two
checkpoints and what the checkpoint tables weigh. Plain SQL over the canonical views of
core/sql/005_msgpack_decoder.sql (payloads decoded in SQL, nothing executed), returned as DataFrames.

Ids are matched with `=` only, never LIKE: `%`, `_` and quotes are ordinary characters, and any
text finds exactly that thread (or customer) or nothing.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from core.capture.follower import apply_pending
from core.db import Database, one
from core.history import delta, formats, message_diff
from core.ids import ThreadId

RECENT_WINDOW = 5000  # newest checkpoints scanned (the change follower's ts index) to list recently active threads

THREAD_COLUMNS = ["thread_id", "cliente_id", "agente", "checkpoints", "first_ts", "last_ts", "last_step"]

# One summary row per thread of `%(threads)s` (an array), newest activity first.
SELECT_THREAD_SUMMARY = """
SELECT thread_id, max(cliente_id) AS cliente_id, max(agente) AS agente, count(*) AS checkpoints,
       min(ts) AS first_ts, max(ts) AS last_ts, max(step) AS last_step
FROM core_checkpoints_view
WHERE thread_id = ANY(%(threads)s)
GROUP BY thread_id
ORDER BY last_ts DESC NULLS LAST, thread_id
LIMIT %(limit)s"""


SELECT_RECENT_THREADS = """
SELECT thread_id FROM (
    SELECT thread_id, ts FROM core_checkpoint_shadow WHERE ts IS NOT NULL ORDER BY ts DESC LIMIT %(window)s
) recent
GROUP BY thread_id ORDER BY max(ts) DESC LIMIT %(limit)s"""

SELECT_TIMELINE = """
SELECT v.checkpoint_ns, v.checkpoint_id, v.parent_checkpoint_id, v.ts, v.step, v.source, v.cliente_id, v.agente,
       v.updated_channels, v.pending_writes, v.pending_write_bytes, v.checkpoint_bytes,
       (SELECT string_agg(DISTINCT w.tool_name, ',') FROM core_checkpoint_writes_view w
        WHERE w.thread_id = v.thread_id AND w.checkpoint_ns = v.checkpoint_ns
          AND w.checkpoint_id = v.checkpoint_id AND w.tool_name IS NOT NULL) AS tools,
       (SELECT count(*) FROM core_checkpoint_writes_view w
        WHERE w.thread_id = v.thread_id AND w.checkpoint_ns = v.checkpoint_ns
          AND w.checkpoint_id = v.checkpoint_id AND w.undecodable IS NOT NULL) AS undecodable_writes,
       (SELECT string_agg(DISTINCT w.refused_type, ',') FROM core_checkpoint_writes_view w
        WHERE w.thread_id = v.thread_id AND w.checkpoint_ns = v.checkpoint_ns
          AND w.checkpoint_id = v.checkpoint_id AND w.refused_type IS NOT NULL) AS refused_writes,
       v.refused_type AS refused_value
FROM core_checkpoints_view v
WHERE v.thread_id = %(thread_id)s
ORDER BY v.ts NULLS LAST, v.checkpoint_id"""
TIMELINE_COLUMNS = [
    "checkpoint_ns",
    "checkpoint_id",
    "parent_checkpoint_id",
    "ts",
    "step",
    "source",
    "cliente_id",
    "agente",
    "updated_channels",
    "pending_writes",
    "pending_write_bytes",
    "checkpoint_bytes",
    "tools",
    "undecodable_writes",
    "refused_writes",
    "refused_value",
]

SELECT_WRITES = """
SELECT w.checkpoint_ns, w.checkpoint_id, w.step, w.ts, w.task_path, w.task_id, w.idx, w.channel, w.blob_type,
       w.size_bytes, w.message_kind, w.tool_name, w.tool_calls,
       (SELECT string_agg(CASE jsonb_typeof(m -> 'content') WHEN 'string' THEN m ->> 'content'
                                                            ELSE (m -> 'content')::text END, ' | ')
        FROM jsonb_array_elements(w.messages) m) AS content,
       w.payload, w.undecodable, w.refused_type
FROM core_checkpoint_writes_view w
WHERE w.thread_id = %(thread_id)s AND (%(checkpoint_id)s::text IS NULL OR w.checkpoint_id = %(checkpoint_id)s)
ORDER BY w.ts NULLS LAST, w.checkpoint_id, w.task_path, w.task_id, w.idx"""
WRITES_COLUMNS = [
    "checkpoint_ns",
    "checkpoint_id",
    "step",
    "ts",
    "task_path",
    "task_id",
    "idx",
    "channel",
    "blob_type",
    "size_bytes",
    "message_kind",
    "tool_name",
    "tool_calls",
    "content",
    "payload",
    "undecodable",
    "refused_type",
]

# Channels of two checkpoints of one thread side by side. `change`: added, removed, changed (value),
# version (same value, new version) or unchanged.
SELECT_DIFF = """
WITH a AS (
    SELECT channel_versions, channel_values FROM core_checkpoints_view
    WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(ns)s AND checkpoint_id = %(old)s
), b AS (
    SELECT channel_versions, channel_values FROM core_checkpoints_view
    WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(ns)s AND checkpoint_id = %(new)s
), channels AS (
    SELECT jsonb_object_keys(coalesce(channel_versions, '{}') || channel_values) AS channel FROM a
    UNION
    SELECT jsonb_object_keys(coalesce(channel_versions, '{}') || channel_values) FROM b
)
SELECT ch.channel,
       CASE WHEN NOT (a.channel_versions ? ch.channel OR a.channel_values ? ch.channel) THEN 'added'
            WHEN NOT (b.channel_versions ? ch.channel OR b.channel_values ? ch.channel) THEN 'removed'
            WHEN a.channel_values -> ch.channel IS DISTINCT FROM b.channel_values -> ch.channel THEN 'changed'
            WHEN a.channel_versions ->> ch.channel IS DISTINCT FROM b.channel_versions ->> ch.channel THEN 'version'
            ELSE 'unchanged' END                         AS change,
       a.channel_versions ->> ch.channel                 AS old_version,
       b.channel_versions ->> ch.channel                 AS new_version,
       a.channel_values -> ch.channel                    AS old_value,
       b.channel_values -> ch.channel                    AS new_value
FROM channels ch CROSS JOIN a CROSS JOIN b
ORDER BY (CASE WHEN a.channel_values -> ch.channel IS DISTINCT FROM b.channel_values -> ch.channel THEN 0 ELSE 1 END),
         ch.channel"""
DIFF_COLUMNS = ["channel", "change", "old_version", "new_version", "old_value", "new_value"]

SELECT_THREAD_STORAGE = """
SELECT (SELECT count(*) FROM checkpoints WHERE thread_id = %(thread_id)s) AS checkpoints,
       (SELECT coalesce(sum(pg_column_size(checkpoint) + pg_column_size(metadata)), 0)
        FROM checkpoints WHERE thread_id = %(thread_id)s)                                   AS checkpoint_bytes,
       (SELECT count(*) FROM checkpoint_blobs WHERE thread_id = %(thread_id)s)              AS blobs,
       (SELECT coalesce(sum(octet_length(blob)), 0) FROM checkpoint_blobs WHERE thread_id = %(thread_id)s) AS
       blob_bytes,
       (SELECT count(*) FROM checkpoint_writes WHERE thread_id = %(thread_id)s)             AS writes,
       (SELECT coalesce(sum(octet_length(blob)), 0) FROM checkpoint_writes WHERE thread_id = %(thread_id)s) AS
       write_bytes"""
STORAGE_COLUMNS = ["checkpoints", "checkpoint_bytes", "blobs", "blob_bytes", "writes", "write_bytes"]

# The live aggregate (three full scans) in one statement: what the refresh ran before issue 14, kept as the
# reference the benches time (tests/test_storage_batches.py keeps its own copy). At 10M checkpoint writes /
# 1M threads it needed more than 3 GB of temp space.
LIVE_THREAD_STORAGE = """
WITH c AS (
    SELECT thread_id, count(*) AS checkpoints, sum(pg_column_size(checkpoint) + pg_column_size(metadata)) AS
    checkpoint_bytes,
           max(metadata ->> 'cliente_id') AS cliente_id, max(checkpoint ->> 'ts') AS last_ts
    FROM checkpoints GROUP BY thread_id
), b AS (
    SELECT thread_id, count(*) AS blobs, sum(coalesce(octet_length(blob), 0)) AS blob_bytes
    FROM checkpoint_blobs GROUP BY thread_id
), w AS (
    SELECT thread_id, count(*) AS writes, sum(octet_length(blob)) AS write_bytes
    FROM checkpoint_writes GROUP BY thread_id
)
SELECT coalesce(c.thread_id, b.thread_id, w.thread_id) AS thread_id, c.cliente_id,
       coalesce(c.checkpoints, 0) AS checkpoints, coalesce(c.checkpoint_bytes, 0) AS checkpoint_bytes,
       coalesce(b.blobs, 0) AS blobs, coalesce(b.blob_bytes, 0) AS blob_bytes,
       coalesce(w.writes, 0) AS writes, coalesce(w.write_bytes, 0) AS write_bytes,
       coalesce(c.checkpoint_bytes, 0) + coalesce(b.blob_bytes, 0) + coalesce(w.write_bytes, 0) AS total_bytes,
       core_try_timestamptz(c.last_ts) AS last_ts
FROM c FULL JOIN b USING (thread_id) FULL JOIN w USING (thread_id)"""

SELECT_LARGEST_THREADS = """
SELECT thread_id, cliente_id, checkpoints, checkpoint_bytes, blobs, blob_bytes, writes, write_bytes, total_bytes,
       last_ts, computed_at
FROM core_thread_storage ORDER BY total_bytes DESC, thread_id LIMIT %(limit)s"""
LARGEST_COLUMNS = [
    "thread_id",
    "cliente_id",
    "checkpoints",
    "checkpoint_bytes",
    "blobs",
    "blob_bytes",
    "writes",
    "write_bytes",
    "total_bytes",
    "last_ts",
    "computed_at",
]


def _usable(text: Any) -> bool:
    """False for a checkpoint or customer id that can match nothing (empty, not text, NUL which PostgreSQL text cannot
    hold). Thread ids are parsed where they enter instead (core.ids.ThreadId)."""
    return isinstance(text, str) and text != "" and "\x00" not in text


def _summary(db: Database, threads: list[str], limit: int) -> pd.DataFrame:
    if not threads:
        return pd.DataFrame(columns=THREAD_COLUMNS)
    rows = db.fetch(SELECT_THREAD_SUMMARY, {"threads": threads, "limit": limit})
    return pd.DataFrame(rows, columns=THREAD_COLUMNS)


def find_thread(db: Database, thread_id: ThreadId) -> pd.DataFrame:
    """The thread whose id is exactly `thread_id` (0 or 1 row of THREAD_COLUMNS)."""
    return _summary(db, [thread_id], 1)


def threads_of_customer(db: Database, cliente_id: str, limit: int = 200, config: Any = None) -> pd.DataFrame:
    """The customer's threads as the subject resolver attributes them (core.privacy.subjects: metadata keys,
    thread-id patterns, `hilo` links, our logs, the configured query), newest activity first, with a `sources`
    column naming what found each one. Unusable ids find nothing."""
    from core.privacy import subjects as subj

    empty = pd.DataFrame(columns=THREAD_COLUMNS + ["sources"])
    if not _usable(cliente_id):
        return empty
    try:
        found = subj.resolve(db, cliente_id, config)
    except subj.InvalidIdentifier:
        return empty
    frame = _summary(db, found.thread_ids, limit)
    frame["sources"] = [", ".join(found.threads.get(t, ())) for t in frame["thread_id"]]
    return frame


def recent_threads(db: Database, limit: int = 50) -> pd.DataFrame:
    """Threads with the newest checkpoints (among the newest RECENT_WINDOW checkpoints), as of the change follower
    (or current, when no follower runs: this read applies what the slot holds)."""
    apply_pending(db.dsn)
    recent = db.ours.fetch(SELECT_RECENT_THREADS, {"window": RECENT_WINDOW, "limit": limit})  # the follower's, ours
    threads = [r["thread_id"] for r in recent]
    return _summary(db, threads, limit)


def thread_timeline(db: Database, thread_id: ThreadId) -> pd.DataFrame:
    """Every checkpoint of a thread in time order: step, source, channels it updated, the writes
    pending on it (count, bytes, tools named), how many of them cannot be decoded, the types the
    serializer would refuse in its writes (`refused_writes`) and in its channel values (`refused_value`)."""
    df = pd.DataFrame(db.fetch(SELECT_TIMELINE, {"thread_id": thread_id}), columns=TIMELINE_COLUMNS)
    df["updated_channels"] = df["updated_channels"].map(lambda v: ", ".join(v) if isinstance(v, list) else "")
    return df


def _json_text(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def step_writes(db: Database, thread_id: ThreadId, checkpoint_id: str | None = None) -> pd.DataFrame:
    """A thread's pending writes (all, or those made from one checkpoint), decoded: message kind,
    tool name, tool calls and content for chat messages; `payload` and `tool_calls` as JSON text;
    `undecodable` holds the reason when a blob cannot be decoded (the other rows are unaffected);
    `refused_type` the first type the serializer allowlist refuses (the agents cannot load it)."""
    rows = db.fetch(SELECT_WRITES, {"thread_id": thread_id, "checkpoint_id": checkpoint_id})
    if any(formats.is_encrypted(r["blob_type"]) for r in rows):
        rows = _decrypted(db, thread_id, rows)
    df = pd.DataFrame(rows, columns=WRITES_COLUMNS)
    for column in ("tool_calls", "payload"):
        df[column] = df[column].map(_json_text)
    return df


def _decrypted(db: Database, thread_id: str, rows: list[dict]) -> list[dict]:
    """`rows` with the encrypted writes a configured key opens decoded in Python (core.history.formats);
    the others keep the SQL decoder's `encrypted` marker."""
    decryptor = formats.decryptor()
    with db.connection() as conn:
        opened = formats.decrypted_writes(conn, decryptor, [thread_id])
    out = []
    for r in rows:
        key = (thread_id, r["checkpoint_ns"], r["checkpoint_id"], r["task_id"], r["idx"])
        if key in opened:
            payload = opened[key]
            msgs = formats.messages_of(payload)
            calls = [c for m in msgs for c in m.get("tool_calls", [])]
            r = {
                **r,
                "payload": payload,
                "undecodable": None,
                "refused_type": formats.refused_type(payload),
                "message_kind": ",".join(m["kind"] for m in msgs) or None,
                "tool_name": ",".join(m["tool_name"] for m in msgs if m.get("tool_name")) or None,
                "tool_calls": calls or None,
                "content": " | ".join(
                    m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content")) for m in msgs
                )
                or None,
            }
        out.append(r)
    return out


def checkpoint_diff(
    db: Database, thread_id: ThreadId, old_checkpoint_id: str, new_checkpoint_id: str, checkpoint_ns: str = ""
) -> pd.DataFrame:
    """Channel by channel, the values of two checkpoints of one thread (changed ones first).
    Values are JSON text; empty when either checkpoint does not exist in that thread. A DeltaChannel's value
    is the one langgraph reads there (core.history.delta), or its last snapshot plus the writes since."""
    if not all(_usable(x) for x in (old_checkpoint_id, new_checkpoint_id)):
        return pd.DataFrame(columns=DIFF_COLUMNS)
    params = {"thread_id": thread_id, "ns": checkpoint_ns, "old": old_checkpoint_id, "new": new_checkpoint_id}
    df = pd.DataFrame(db.fetch(SELECT_DIFF, params), columns=DIFF_COLUMNS)
    deltas = delta.thread_values(db, thread_id) if len(df) else delta.ThreadValues()
    if deltas.channels:
        old, new = deltas.at(old_checkpoint_id, checkpoint_ns), deltas.at(new_checkpoint_id, checkpoint_ns)
        for i, row in df[df["channel"].isin(list(deltas.channels))].iterrows():
            a, b = old.get(row["channel"]), new.get(row["channel"])
            df.at[i, "old_value"] = a.shown if a else None
            df.at[i, "new_value"] = b.shown if b else None
            if a and b:
                df.at[i, "change"] = (
                    "changed"
                    if a.shown != b.shown
                    else "version"
                    if row["old_version"] != row["new_version"]
                    else "unchanged"
                )
    for column in ("old_value", "new_value"):
        df[column] = df[column].map(_json_text)
    # a trigger channel (`branch:to:...`) holds no value: a new version of it is not a changed value
    same = df["old_value"].fillna("\0") == df["new_value"].fillna("\0")
    df.loc[same & (df["change"] == "changed"), "change"] = "version"
    df.loc[same & (df["change"] == "version") & (df["old_version"] == df["new_version"]), "change"] = "unchanged"
    order = df["change"].isin(["added", "removed", "changed"]).map({True: 0, False: 1})
    return (
        df.assign(_order=order)
        .sort_values(["_order", "channel"], kind="stable")
        .drop(columns="_order")
        .reset_index(drop=True)
    )


def message_diffs(diff: pd.DataFrame) -> dict[str, message_diff.MessageDiff]:
    """For each channel of a `checkpoint_diff` whose values are lists of chat messages (`messages`, any
    add_messages channel) and that changed: the messages added, removed and changed, by message id."""
    out = {}
    for row in diff[diff["change"].isin(["added", "removed", "changed"])].itertuples():
        found = message_diff.message_diff(
            *(None if pd.isna(v) else json.loads(v) for v in (row.old_value, row.new_value))
        )
        if found is not None:
            out[row.channel] = found
    return out


SELECT_VALUES = """
SELECT channel_versions, channel_values FROM core_checkpoints_view
WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(ns)s AND checkpoint_id = %(checkpoint_id)s"""
VALUES_COLUMNS = ["channel", "version", "source", "reducer", "snapshot_step", "writes_since", "value"]


def checkpoint_values(db: Database, thread_id: ThreadId, checkpoint_id: str, checkpoint_ns: str = "") -> pd.DataFrame:
    """Every channel's value at one checkpoint, as JSON text, by name. `source`: `stored` (the checkpoint holds
    it), and for a DeltaChannel `snapshot`, `rebuilt` (by `reducer`, from the last snapshot and the writes
    since) or `unrebuilt` (no known reducer: `value` holds the snapshot at `snapshot_step` and the
    `writes_since` writes, decoded). Empty when the checkpoint is not in that thread."""
    if not _usable(checkpoint_id) or not isinstance(checkpoint_ns, str):
        return pd.DataFrame(columns=VALUES_COLUMNS)
    row = db.fetch_one(SELECT_VALUES, {"thread_id": thread_id, "ns": checkpoint_ns, "checkpoint_id": checkpoint_id})
    if row is None:
        return pd.DataFrame(columns=VALUES_COLUMNS)
    versions, values = row["channel_versions"] or {}, row["channel_values"] or {}
    deltas = delta.thread_values(db, thread_id).at(checkpoint_id, checkpoint_ns)
    rows = []
    for channel in sorted(set(versions) | set(values) | set(deltas)):
        d = deltas.get(channel)
        if d is None:
            rows.append([channel, versions.get(channel), "stored", None, None, None, values.get(channel)])
        else:
            rows.append(
                [
                    channel,
                    versions.get(channel),
                    d.kind,
                    d.reducer,
                    d.seed_step if d.kind == "unrebuilt" else None,
                    len(d.writes) if d.kind == "unrebuilt" else None,
                    d.shown,
                ]
            )
    df = pd.DataFrame(rows, columns=VALUES_COLUMNS)
    df["value"] = df["value"].map(_json_text)
    return df


DELTA_COLUMNS = ["channel", "reducer", "snapshots_checked", "contradicted"]


def delta_channels(db: Database, thread_id: ThreadId) -> pd.DataFrame:
    """The thread's DeltaChannels and how their values are read: `reducer` (`messages`, `concat`, or None when
    unknown), the snapshots of the thread it reproduced, and the checkpoint whose snapshot contradicted the
    reducer the payloads looked like (`contradicted`). Empty for a thread without DeltaChannels."""
    channels = delta.thread_values(db, thread_id).channels.values()
    return pd.DataFrame(
        [[c.channel, c.reducer, c.snapshots_checked, c.contradicted] for c in channels], columns=DELTA_COLUMNS
    )


def thread_storage(db: Database, thread_id: ThreadId) -> dict[str, int]:
    """Rows and bytes of one thread in each checkpoint table (bytes: stored payload sizes)."""
    row = one(db.fetch_one(SELECT_THREAD_STORAGE, {"thread_id": thread_id}))
    return {k: int(row[k]) for k in STORAGE_COLUMNS}


def largest_threads(db: Database, limit: int = 20) -> pd.DataFrame:
    """The threads that weigh most across checkpoints, blobs and writes, as of the last refresh
    (`computed_at`; the sweep job refreshes it)."""
    return pd.DataFrame(db.ours.fetch(SELECT_LARGEST_THREADS, {"limit": limit}), columns=LARGEST_COLUMNS)  # issue 52
