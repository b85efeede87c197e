"""The value of a `DeltaChannel` at each checkpoint of a thread (issue 28).

A DeltaChannel (langgraph >= 1.2, beta) stores its value only at snapshots: a `_DeltaSnapshot` blob every
`snapshot_frequency` updates (and a `true` marker inline). In between, a checkpoint holds no value for it, and
langgraph rebuilds one on read (langgraph.pregel._checkpoint.channels_from_checkpoint and the saver's
`get_delta_channel_history`): a checkpoint with a stored value at its version (a blob, or an inline primitive)
reads that; otherwise it walks from its parent up to the first ancestor with a stored value, and passes that
seed (or an empty list when the walk reaches the root) and the writes pending on every checkpoint of the walk,
oldest first (within one checkpoint by `writes_sort_key`: task_path, task_id, idx), to the channel's reducer.

The reducer is Python code of the agent, which a dashboard does not have. Two are known here:
- `messages`: langgraph's own `_messages_delta_reducer` (langgraph.graph.message), the batch twin of
  `add_messages` for DeltaChannels: replacement by id, `RemoveMessage` tombstones. It runs on stand-in messages
  carrying only the id and the kind (remove or not), so the decoded payloads are never turned into objects;
- `concat`: list concatenation (each write is a list, appended).
A channel is given the first of them its payloads fit (every write and stored value a list of decoded
langchain messages; or lists) that reproduces every snapshot of the thread from the value before it. When none
fits, or one failed a snapshot, the channel's value is not guessed: it is shown as its last snapshot (step,
checkpoint) plus the writes since, decoded.

Payloads are decoded in SQL (core_checkpoint_payload): nothing is unpickled or executed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import ChatMessage, RemoveMessage
from langgraph.checkpoint.base import writes_sort_key
from langgraph.graph.message import _messages_delta_reducer

from core.db import Database

SNAPSHOT_TYPE = "langgraph.checkpoint.serde.types._DeltaSnapshot"
MESSAGE_PREFIX = "langchain_core.messages."

# The thread's DeltaChannels: those langgraph counts in metadata, and those holding a snapshot blob.
SELECT_CHANNELS = """
SELECT k AS channel FROM checkpoints c,
     jsonb_object_keys(CASE WHEN jsonb_typeof(c.metadata -> 'counters_since_delta_snapshot') = 'object'
                            THEN c.metadata -> 'counters_since_delta_snapshot' ELSE '{}' END) k
WHERE c.thread_id = %(thread_id)s
UNION
SELECT channel FROM checkpoint_blobs
WHERE thread_id = %(thread_id)s AND core_blob_format(type, substring(blob FROM 1 FOR 6)) = 'delta'
ORDER BY 1"""

# Every checkpoint with those channels' versions and inline values (no blob decoded per checkpoint).
SELECT_CHECKPOINTS = r"""
SELECT c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
       CASE WHEN c.metadata ->> 'step' ~ '^-?\d{1,9}$' THEN (c.metadata ->> 'step')::integer END AS step,
       (SELECT coalesce(jsonb_object_agg(ch, c.checkpoint -> 'channel_versions' ->> ch), '{}')
        FROM unnest(%(channels)s::text[]) ch WHERE c.checkpoint -> 'channel_versions' ? ch) AS versions,
       (SELECT coalesce(jsonb_object_agg(ch, c.checkpoint -> 'channel_values' -> ch), '{}')
        FROM unnest(%(channels)s::text[]) ch
        WHERE jsonb_typeof(c.checkpoint -> 'channel_values' -> ch) <> 'null') AS inline
FROM checkpoints c
WHERE c.thread_id = %(thread_id)s
ORDER BY c.checkpoint_ns, c.checkpoint_id"""

# Each stored value of those channels, decoded once per version.
SELECT_BLOBS = """
SELECT checkpoint_ns, channel, version, core_checkpoint_payload(type, blob) AS payload
FROM checkpoint_blobs
WHERE thread_id = %(thread_id)s AND channel = ANY(%(channels)s) AND type <> 'empty'"""

SELECT_WRITES = """
SELECT checkpoint_ns, checkpoint_id, coalesce(task_path, '') AS task_path, task_id, idx, channel,
       core_checkpoint_payload(type, blob) AS payload
FROM checkpoint_writes
WHERE thread_id = %(thread_id)s AND channel = ANY(%(channels)s)"""


@dataclass(frozen=True)
class Value:
    """One DeltaChannel at one checkpoint.

    kind: `snapshot` (stored at this checkpoint's version), `rebuilt` (by `reducer`), or `unrebuilt` (no known
    reducer: `seed` is the last stored value, at `seed_step` / `seed_checkpoint_id`, None when the walk reached
    the thread's start, and `writes` the decoded writes since, oldest first)."""

    channel: str
    kind: str
    value: Any = None
    reducer: str | None = None
    seed_checkpoint_id: str | None = None
    seed_step: int | None = None
    seed: Any = None
    writes: tuple = ()

    @property
    def shown(self) -> Any:
        """What a page shows as the channel's value: the value, or the snapshot and the writes since."""
        if self.kind != "unrebuilt":
            return self.value
        return {
            "delta": {
                "snapshot_step": self.seed_step,
                "snapshot_checkpoint_id": self.seed_checkpoint_id,
                "snapshot": self.seed,
                "writes_since": len(self.writes),
                "writes": list(self.writes),
            }
        }


@dataclass(frozen=True)
class Channel:
    """How one DeltaChannel of a thread is read: its reducer (None: unknown), the snapshots that confirmed it,
    and, when a reducer fitting the payloads failed a snapshot, where (`contradicted`: a checkpoint id)."""

    channel: str
    reducer: str | None
    snapshots_checked: int
    contradicted: str | None = None


@dataclass(frozen=True)
class ThreadValues:
    channels: dict[str, Channel] = field(default_factory=dict)
    values: dict[tuple[str, str], dict[str, Value]] = field(default_factory=dict)  # (ns, checkpoint_id) ->

    def at(self, checkpoint_id: str, checkpoint_ns: str = "") -> dict[str, Value]:
        """The DeltaChannels written by `checkpoint_id` (and its ancestors), by name."""
        return self.values.get((checkpoint_ns, checkpoint_id), {})


# --- the known reducers, on decoded JSON payloads ----------------------------------------------------------


def _is_message(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and isinstance(item.get("type"), str)
        and item["type"].startswith(MESSAGE_PREFIX)
        and isinstance(item.get("value"), dict)
    )


def _flat(writes: list) -> list:
    return [x for w in writes for x in (w if isinstance(w, list) else [w])]


def _messages(state: list, writes: list) -> list:
    """langgraph's `_messages_delta_reducer` on stand-ins carrying the decoded messages' ids and kinds."""
    decoded: dict[int, Any] = {}

    def stand_in(m: dict) -> Any:
        mid = m["value"].get("id")
        proxy: RemoveMessage | ChatMessage
        if m["value"].get("type") == "remove" or m["type"].endswith(".RemoveMessage"):
            proxy = RemoveMessage(id=mid)
        else:
            proxy = ChatMessage(content="", role="stand-in", id=mid)
        decoded[id(proxy)] = m
        return proxy

    result = _messages_delta_reducer([stand_in(m) for m in state], [stand_in(m) for m in _flat(writes)])
    return [decoded[id(m)] for m in result]


def _concat(state: list, writes: list) -> list:
    return list(state) + _flat(writes)


def _fits_messages(stored: list, writes: list) -> bool:
    return (
        all(isinstance(v, list) and all(_is_message(m) for m in v) for v in stored)
        and all(_is_message(m) for m in _flat(writes))
        and any(True for _ in _flat(writes) + stored)
    )


def _fits_concat(stored: list, writes: list) -> bool:
    return all(isinstance(v, list) for v in stored + writes)


REDUCERS: dict[str, tuple[Callable[[list, list], list], Callable[[list, list], bool]]] = {
    "messages": (_messages, _fits_messages),
    "concat": (_concat, _fits_concat),
}


# --- the walk ----------------------------------------------------------------------------------------------


@dataclass
class _Checkpoint:
    ns: str
    id: str
    parent: str | None
    step: int | None
    versions: dict
    stored: dict  # channel -> value stored at this checkpoint's version (a snapshot's value unwrapped)
    writes: dict  # channel -> [payload] pending on this checkpoint, in writes_sort_key order


def _unwrap(payload: Any) -> Any:
    if isinstance(payload, dict) and payload.get("type") == SNAPSHOT_TYPE:
        return payload.get("value")
    return payload


def _load(db: Database, thread_id: str) -> tuple[list[str], list[_Checkpoint]]:
    params: dict[str, Any] = {"thread_id": thread_id}
    with db.connection() as conn:
        channels = [r["channel"] for r in conn.execute(SELECT_CHANNELS, params)]
        if not channels:
            return [], []
        params["channels"] = channels
        rows = conn.execute(SELECT_CHECKPOINTS, params).fetchall()
        blobs = {
            (r["checkpoint_ns"], r["channel"], r["version"]): r["payload"] for r in conn.execute(SELECT_BLOBS, params)
        }
        writes: dict[tuple[str, str, str], list] = {}
        for w in sorted(
            conn.execute(SELECT_WRITES, params).fetchall(),
            key=lambda w: writes_sort_key(w["task_path"], w["task_id"], w["idx"]),
        ):
            writes.setdefault((w["checkpoint_ns"], w["checkpoint_id"], w["channel"]), []).append(w["payload"])
    checkpoints = []
    for r in rows:
        ns, versions = r["checkpoint_ns"], r["versions"]
        stored = {}
        for ch, version in versions.items():
            if (ns, ch, version) in blobs:  # a blob wins over the inline `true` marker, as langgraph reads it
                stored[ch] = _unwrap(blobs[(ns, ch, version)])
            elif ch in r["inline"]:
                stored[ch] = r["inline"][ch]
        checkpoints.append(
            _Checkpoint(
                ns,
                r["checkpoint_id"],
                r["parent_checkpoint_id"],
                r["step"],
                versions,
                stored,
                {ch: writes.get((ns, r["checkpoint_id"], ch), []) for ch in channels},
            )
        )
    return channels, checkpoints


@dataclass
class _Walk:
    """A channel's state after a checkpoint's parent chain: the seed it starts from and the writes since."""

    seed_checkpoint: _Checkpoint | None
    seed: Any
    writes: list
    values: dict  # reducer name -> value rebuilt by it, or None once it failed


def _choose(channel: str, checkpoints: list[_Checkpoint]) -> tuple[Channel, dict[tuple[str, str], _Walk]]:
    """The first known reducer the channel's payloads fit that reproduces each of its snapshots from the value
    before it, and the walks it rebuilt the channel with."""
    stored = [c.stored[channel] for c in checkpoints if channel in c.stored]
    writes = [w for c in checkpoints for w in c.writes[channel]]
    fitting = [name for name, (_, fits) in REDUCERS.items() if fits(stored, writes)]
    walks = _walks(channel, checkpoints, fitting)
    failed: dict[str, str] = {}
    checked: dict[str, set] = {name: set() for name in fitting}
    for c in checkpoints:
        if channel not in c.stored or c.parent is None:
            continue
        for name in fitting:
            rebuilt = walks[(c.ns, c.id)].values[name]
            if name in failed or rebuilt is None:
                continue
            if rebuilt == c.stored[channel]:
                checked[name].add(c.versions.get(channel))
            else:
                failed[name] = c.id
    for name in fitting:
        if name not in failed:
            return Channel(channel, name, len(checked[name])), walks
    return Channel(channel, None, 0, contradicted=failed[fitting[0]] if fitting else None), walks


def _walks(channel: str, checkpoints: list[_Checkpoint], reducers: list[str]) -> dict[tuple[str, str], _Walk]:
    """For each checkpoint: the walk from its parent to the first ancestor with a stored value, and the value
    each reducer rebuilds from it. Parents come before children (checkpoint ids are time-ordered uuid6, which
    langgraph's own reader relies on); a walk extends its parent's walk."""
    by_id = {(c.ns, c.id): c for c in checkpoints}
    walks: dict[tuple[str, str], _Walk] = {}
    for c in checkpoints:
        parent = by_id.get((c.ns, c.parent)) if c.parent else None
        if c.parent and parent is None:  # an ancestor is gone (pruned): nothing can be rebuilt
            walks[(c.ns, c.id)] = _Walk(None, None, [], {name: None for name in reducers})
            continue
        if parent is None:
            walks[(c.ns, c.id)] = _Walk(None, None, [], {name: [] for name in reducers})
            continue
        new = parent.writes[channel]
        if channel in parent.stored:
            seed = parent.stored[channel]
            walk = _Walk(parent, seed, list(new), {})
            base = {name: seed if isinstance(seed, list) else None for name in reducers}
        else:
            up = walks[(parent.ns, parent.id)]
            walk = _Walk(up.seed_checkpoint, up.seed, up.writes + new, {})
            base = up.values
        for name in reducers:
            value = base[name]
            walk.values[name] = None if value is None else REDUCERS[name][0](value, new) if new else value
        walks[(c.ns, c.id)] = walk
    return walks


def thread_values(db: Database, thread_id: str) -> ThreadValues:
    """Every DeltaChannel's value at every checkpoint of the thread that has a version for it (empty when the
    thread has no DeltaChannel)."""
    channels, checkpoints = _load(db, thread_id)
    out = ThreadValues()
    for channel in channels:
        chosen, walks = _choose(channel, checkpoints)
        out.channels[channel] = chosen
        for c in checkpoints:
            if channel not in c.versions:
                continue
            walk = walks[(c.ns, c.id)]
            if channel in c.stored:
                value = Value(channel, "snapshot", c.stored[channel], chosen.reducer)
            elif chosen.reducer and walk.values[chosen.reducer] is not None:
                value = Value(channel, "rebuilt", walk.values[chosen.reducer], chosen.reducer)
            else:
                seed = walk.seed_checkpoint
                value = Value(
                    channel,
                    "unrebuilt",
                    seed=walk.seed,
                    writes=tuple(walk.writes),
                    seed_checkpoint_id=seed.id if seed else None,
                    seed_step=seed.step if seed else None,
                )
            out.values.setdefault((c.ns, c.id), {})[channel] = value
    return out
