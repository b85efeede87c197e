"""The degraded buffer: whether the saver is degraded, and what it serves and keeps while it is.

While degraded, writes go to an `InMemorySaver` and, as the rows `PostgresSaver` would write (serialized
at once), to the resync log, in order; reads see the buffer plus what the read cache says PostgreSQL
had (seeded into the buffer the first time a thread is touched in an episode, never for an erased
thread). The switch back to healthy happens only once the log is empty (`leave`).

Every operation of the log carries an id (a uuid4, `(kind, rows, id)`), by which a replay never applies
it twice (agent_memory_runtime.recovery). A `delete_thread` keeps what it meant: the thread, the time of
the call and the head checkpoint of each namespace this replica knew then (agent_memory_runtime.thread_fates).

The journal (agent_memory_runtime.journal) keeps the log across a process death: an operation is appended
to it, fsynced, in `_buffer` before it enters the log (write-ahead; a failed append refuses the call
and changes nothing); `committed` rewrites it with what is left; `journal` adds a close's episodes and
denials; `journaled` reads what an earlier run left (set aside at construction).
"""

from __future__ import annotations

import builtins
import copy
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres.base import BasePostgresSaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from agent_memory_runtime.failures import BufferFull, CheckpointUnavailable
from agent_memory_runtime.journal import Journal
from agent_memory_runtime.read_cache import ReadCache, thread_of


class BufferedEpisode(NamedTuple):
    """What an episode kept: when and why it began, what was buffered, and the guard's denials."""

    since: datetime | None
    reason: str | None
    checkpoints: int
    writes: int
    resynced: int  # operations written to PostgreSQL by resync rounds so far
    denials: list[dict[str, Any]]


class _State:
    """The buffer's mutable state, shared by its views (one per serializer)."""

    def __init__(self, journal: Journal):
        self.degraded = False
        self.since: datetime | None = None
        self.reason: str | None = None
        self.checkpoints = 0
        self.writes = 0
        self.resynced = 0
        self.denials: list[dict[str, Any]] = []
        self.seeded: set[str] = set()  # threads copied from the read cache into memory this episode
        self.tombstoned: set[str] = set()  # erased threads seen (tombstones): never seeded or replayed
        self.ops: list[tuple[str, Any, str]] = []  # the resync log, in order: rows as PostgresSaver writes them
        self.transitions: list[tuple[float, str]] = [(time.monotonic(), "healthy")]
        self.journal_pending = journal.set_aside()


class DegradedBuffer:
    """The mode (healthy or degraded), the read cache, the memory buffer, the resync log and the journal.

    One per saver and its `with_allowlist` clones; `with_serde` gives a clone a view of the same
    buffer whose memory saver loads and dumps with the clone's serializer.
    """

    def __init__(
        self,
        serde: SerializerProtocol,
        *,
        thread_cache_size: int,
        max_ops: int,
        journal: Journal,
        now: Callable[[], datetime],
    ):
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)  # notified on every switch
        self._state = _State(journal)
        self._cache = ReadCache(thread_cache_size)
        self._journal = journal
        self._max_ops = max_ops
        self._now = now
        self._storage = InMemorySaver()  # the buffer's dicts; each view's memory saver shares them
        self._bind(serde)

    def with_serde(self, serde: SerializerProtocol) -> DegradedBuffer:
        view = copy.copy(self)
        view._bind(serde)
        return view

    def _bind(self, serde: SerializerProtocol) -> None:
        memory = copy.copy(self._storage)  # shares the buffer's dicts
        memory.serde = serde
        self._memory = memory
        self._rows = BasePostgresSaver(serde=serde)  # serializes rows as PostgresSaver.put would

    # --- the mode ---------------------------------------------------------------------------------

    @property
    def degraded(self) -> bool:
        return self._state.degraded  # a plain read: every call and tool call asks

    def degrade(self, reason: str) -> bool:
        """Begin an episode; False if one is already open."""
        st = self._state
        with self._changed:
            if st.degraded:
                return False
            st.degraded = True
            st.since = self._now()
            st.reason = reason
            st.checkpoints = st.writes = st.resynced = 0
            st.denials = []
            st.seeded = set()
            st.transitions.append((time.monotonic(), "degraded"))
            self._changed.notify_all()
        return True

    def wait_for(self, state: str, timeout: float) -> bool:
        """Block until "healthy" (the log empty) or "degraded"; False on timeout."""
        want = state == "degraded"
        st = self._state
        with self._changed:
            return self._changed.wait_for(lambda: st.degraded == want and (want or not st.ops), timeout)

    def transitions(self) -> list[tuple[float, str]]:
        with self._lock:
            return list(self._state.transitions)

    def status(self) -> dict[str, Any]:
        """The buffer's part of the saver's `status()` (the counts are the last episode's)."""
        st = self._state
        with self._lock:
            return {
                "state": "degraded" if st.degraded else "healthy",
                "degraded_since": st.since,
                "reason": st.reason,
                "buffered_ops": len(st.ops),
                "buffered_checkpoints": st.checkpoints,
                "buffered_writes": st.writes,
                "buffer_limit": self._max_ops,
                "tombstones_known": len(st.tombstoned),
                "degraded_seconds": (self._now() - st.since).total_seconds() if st.since else 0.0,
            }

    def open_episode(self) -> BufferedEpisode | None:
        """The episode so far, or None when healthy."""
        st = self._state
        with self._lock:
            if not st.degraded:
                return None
            return BufferedEpisode(st.since, st.reason, st.checkpoints, st.writes, st.resynced, list(st.denials))

    def keep_denial(self, row: dict[str, Any]) -> bool:
        """Keep a guard denial with the open episode; False when healthy (not an episode's)."""
        with self._lock:
            if not self._state.degraded:
                return False
            self._state.denials.append(row)
            return True

    # --- read cache (what PostgreSQL had, for degraded reads) ---------------------------------------

    def remember(self, tup: CheckpointTuple | None) -> None:
        self._cache.remember(tup)

    def remember_put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, next_config: RunnableConfig
    ) -> None:
        self._cache.remember_put(config, checkpoint, metadata, next_config)

    def remember_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str) -> None:
        self._cache.remember_writes(config, writes, task_id)

    def forget_thread(self, thread_id: str) -> None:
        self._cache.forget({str(thread_id)})

    def learn_tombstones(self, thread_ids: Iterable[str]) -> None:
        """Erased threads (core_thread_tombstones): out of the read cache, never seeded again."""
        st = self._state
        new = set(thread_ids) - st.tombstoned
        if not new:
            return
        with self._lock:
            st.tombstoned |= new
        self._cache.forget(new)

    def tombstoned(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._state.tombstoned)

    def _seed(self, thread_id: str | None) -> None:
        """Copy what PostgreSQL had for a thread (or every cached thread) into the memory buffer.

        Called under the lock, only while degraded. Not logged for resync: it is in PostgreSQL.
        """
        st = self._state
        for tup in self._cache.tuples(thread_id, skip=st.seeded | st.tombstoned):  # never seed an erased thread
            tid, ns, checkpoint_id = thread_of(tup.config)
            if self._storage.storage.get(tid, {}).get(ns, {}).get(checkpoint_id or "") is None:
                parent = tup.parent_config or {"configurable": {"thread_id": tid, "checkpoint_ns": ns}}
                self._memory.put(parent, tup.checkpoint, tup.metadata, tup.checkpoint["channel_versions"])
                by_task: dict[str, list[tuple[str, Any]]] = {}
                for task_id, channel, value in tup.pending_writes or []:
                    by_task.setdefault(task_id, []).append((channel, value))
                for task_id, writes in by_task.items():
                    self._memory.put_writes(tup.config, writes, task_id)
        if thread_id is None:
            st.seeded.update(self._cache.threads())
        else:
            st.seeded.add(thread_id)

    # --- degraded reads and writes (memory buffer + resync log) ---------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """None also when no longer degraded (recovered meanwhile: the caller asks PostgreSQL again)."""
        thread_id, _, checkpoint_id = thread_of(config)
        with self._lock:
            if not self._state.degraded:
                return None
            self._seed(thread_id)
            found = self._memory.get_tuple(config)
        if found is None and checkpoint_id:
            raise CheckpointUnavailable(
                f"checkpoint {checkpoint_id} of thread {thread_id} is not in this replica's buffer and "
                f"PostgreSQL is unreachable"
            )
        return found

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> list[CheckpointTuple] | None:
        """None when no longer degraded."""
        with self._lock:
            if not self._state.degraded:
                return None
            self._seed(
                str(config["configurable"]["thread_id"])
                if config and config["configurable"].get("thread_id") is not None
                else None
            )
            return list(self._memory.list(config, **kwargs))

    def _buffer(
        self, kind: str, config: RunnableConfig | None, apply: Callable[[], Any], rows: Any
    ) -> tuple[bool, Any]:
        """Apply to memory and append to the resync log, atomically; (False, None) if no longer degraded.
        Raises BufferFull, changing nothing, when the log holds `max_ops` operations."""
        st = self._state
        with self._lock:
            if not st.degraded:
                return False, None
            if len(st.ops) >= self._max_ops:
                raise BufferFull(
                    f"checkpoint buffer full: {len(st.ops)} operations buffered while PostgreSQL is "
                    f"unreachable (max_buffered_ops={self._max_ops}); this {kind} is refused and "
                    f"nothing was changed"
                )
            if config is not None:
                self._seed(thread_of(config)[0])
            op = (kind, rows, str(uuid.uuid4()))
            self._journal.append(self._wal_record([op]))  # write-ahead: on disk before it counts
            result = apply()
            st.ops.append(op)
            if kind == "put":
                st.checkpoints += 1
            elif kind == "put_writes":
                st.writes += 1
            return True, result

    def _put_rows(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> tuple[builtins.list[tuple], tuple]:
        """The blob rows and the checkpoint row `PostgresSaver.put` would write, serialized now.

        Same split as PostgresSaver.put: primitives stay inline in the checkpoint JSON, the rest
        (and delta snapshots) go to checkpoint_blobs. The JSON is copied now, since the run goes on
        mutating its dicts after the call.
        """
        conf = config["configurable"]
        thread_id, ns, parent_id = conf["thread_id"], conf["checkpoint_ns"], conf.get("checkpoint_id")
        inline: dict[str, Any] = {**checkpoint, "channel_values": dict(checkpoint["channel_values"])}
        blob_values: dict[str, Any] = {}
        for k, v in checkpoint["channel_values"].items():
            if isinstance(v, _DeltaSnapshot):
                blob_values[k] = inline["channel_values"].pop(k)
                inline["channel_values"][k] = True
            elif v is None or isinstance(v, (str, int, float, bool)):
                pass
            else:
                blob_values[k] = inline["channel_values"].pop(k)
        blob_versions = {k: v for k, v in new_versions.items() if k in blob_values}
        blobs = self._rows._dump_blobs(thread_id, ns, blob_values, blob_versions) if blob_versions else []
        row = (
            thread_id,
            ns,
            checkpoint["id"],
            parent_id,
            json.loads(json.dumps(inline)),
            json.loads(json.dumps(get_serializable_checkpoint_metadata(config, metadata))),
        )
        return blobs, row

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> tuple[bool, Any]:
        rows = self._put_rows(config, checkpoint, metadata, new_versions)
        conf = config["configurable"]
        next_config: RunnableConfig = {
            "configurable": {
                "thread_id": conf["thread_id"],
                "checkpoint_ns": conf["checkpoint_ns"],
                "checkpoint_id": checkpoint["id"],
            }
        }

        def apply() -> RunnableConfig:
            self._memory.put(config, checkpoint, metadata, new_versions)
            # The read cache follows the buffer: after the resync it is what PostgreSQL has, so a
            # thread idle until the next outage is not seeded from before this one (issue 16 #1).
            self._cache.remember_put(config, checkpoint, metadata, next_config)
            return next_config

        return self._buffer("put", config, apply, rows)

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> tuple[bool, Any]:
        conf = config["configurable"]
        upsert = all(w[0] in WRITES_IDX_MAP for w in writes)
        rows = (
            upsert,
            self._rows._dump_writes(
                conf["thread_id"], conf["checkpoint_ns"], conf["checkpoint_id"], task_id, task_path, writes
            ),
        )

        def apply() -> None:
            self._memory.put_writes(config, writes, task_id, task_path)
            self._cache.remember_writes(config, writes, task_id)

        return self._buffer("put_writes", config, apply, rows)

    def delete_thread(self, thread_id: str) -> tuple[bool, Any]:
        thread_id = str(thread_id)

        def apply() -> None:
            self._memory.delete_thread(thread_id)
            self._cache.forget({thread_id})
            self._state.seeded.add(thread_id)

        with self._lock:
            if not self._state.degraded:
                return False, None
            self._seed(thread_id)  # what PostgreSQL had, as far as this replica knows
            heads = {ns: max(ids) for ns, ids in self._storage.storage.get(thread_id, {}).items() if ids}
            # Real time, as langgraph's checkpoint ids (never the demo's clock).
            meant = {"thread_id": thread_id, "at": datetime.now(UTC), "heads": heads}
            return self._buffer("delete_thread", None, apply, meant)

    # --- resync -----------------------------------------------------------------------------------

    def pending(self) -> builtins.list[tuple[str, Any, str]]:
        """The resync log as it is now (it keeps growing while a resync writes this)."""
        with self._lock:
            return list(self._state.ops)

    def committed(self, count: int) -> None:
        """The first `count` operations of the log are in PostgreSQL: the journal keeps the rest."""
        with self._lock:
            del self._state.ops[:count]
            self._state.resynced += count
            self._journal.rewrite([self._wal_record(self._state.ops)] if self._state.ops else [])

    def _wal_record(self, ops: builtins.list[tuple[str, Any, str]]) -> dict[str, Any]:
        return {"since": self._state.since, "ops": ops, "episodes": [], "denials": []}

    def leave(self, on_switch: Callable[[BufferedEpisode], None]) -> BufferedEpisode | None:
        """Back to healthy if the log is empty; None if operations came in since the last round (one more
        round). `on_switch(episode)` runs under the lock just before the switch: no I/O there."""
        st = self._state
        with self._changed:
            if st.ops:
                return None
            episode = BufferedEpisode(st.since, st.reason, st.checkpoints, st.writes, st.resynced, st.denials)
            on_switch(episode)
            self._storage.storage.clear()
            self._storage.writes.clear()
            self._storage.blobs.clear()
            st.seeded = set()
            st.resynced = 0
            st.denials = []
            st.degraded = False
            st.since = None
            st.transitions.append((time.monotonic(), "healthy"))
            self._changed.notify_all()
        return episode

    # --- journal ----------------------------------------------------------------------------------

    @property
    def journal_path(self) -> Path:
        return self._journal.path

    @property
    def journal_pending(self) -> bool:
        """An earlier close left a journal this buffer has not replayed yet."""
        return self._state.journal_pending

    def journaled(self) -> builtins.list[dict[str, Any]]:
        """The records of the journal, oldest first."""
        return self._journal.read()

    def journal_replayed(self) -> None:
        """Everything in the journal an earlier run left is in PostgreSQL: it goes."""
        self._state.journal_pending = self._journal.replayed()

    def closing_record(
        self, *, episodes: builtins.list[dict[str, Any]], denials: builtins.list[dict[str, Any]]
    ) -> dict[str, Any] | None:
        """The journal record of a close: the episodes and denials PostgreSQL does not have yet (the
        resync log is in the journal already); None when there is nothing to keep."""
        if not (episodes or denials):
            return None
        return {"since": self._state.since, "ops": [], "episodes": episodes, "denials": denials}

    def journal(self, record: dict[str, Any]) -> None:
        """Append `record` to the journal, fsynced (raises OSError if it cannot)."""
        self._journal.append(record)
