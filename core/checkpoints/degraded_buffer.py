"""The degraded buffer: the read cache of what PostgreSQL had, the memory buffer and its resync log,
and the reads served from them while PostgreSQL is unreachable."""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
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
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from core.checkpoints.failures import CheckpointUnavailable
from core.checkpoints.saver_state import _thread_of


class _RememberedPut(NamedTuple):
    """A healthy put as the read cache keeps it: `config` is the checkpoint's own and
    `pending_writes` its writes (as in a CheckpointTuple); `put_config` and `metadata` are what the
    put was given."""

    config: RunnableConfig
    checkpoint: Checkpoint
    put_config: RunnableConfig
    metadata: CheckpointMetadata
    pending_writes: Sequence[tuple[str, str, Any]] = ()


def _as_tuple(entry: CheckpointTuple | _RememberedPut) -> CheckpointTuple:
    """The CheckpointTuple that PostgresSaver would return for a cached entry."""
    if isinstance(entry, CheckpointTuple):
        return entry
    thread_id, ns, parent_id = _thread_of(entry.put_config)
    parent = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent_id}} if parent_id else None
    return CheckpointTuple(entry.config, entry.checkpoint,
                           get_serializable_checkpoint_metadata(entry.put_config, entry.metadata), parent,
                           list(entry.pending_writes))


class DegradedBuffer:
    """Mixin of `DualCheckpointSaver`: what it serves and keeps while degraded."""

    # --- read cache (what PostgreSQL had, for degraded reads) ------------------------------

    def _remember(self, tup: CheckpointTuple | _RememberedPut | None) -> None:
        if tup is None:
            return
        sh = self._shared
        conf = tup.config["configurable"]
        key = (str(conf["thread_id"]), conf.get("checkpoint_ns", ""))
        current = sh.cache.get(key)
        if current is not None and current.config["configurable"]["checkpoint_id"] == conf["checkpoint_id"]:
            return  # already known (a plain dict read: no lock needed on this hot path)
        with sh.cache_lock:
            current = sh.cache.get(key)
            if current is not None and current.config["configurable"]["checkpoint_id"] > tup.config["configurable"]["checkpoint_id"]:
                return
            sh.cache[key] = tup
            sh.cache.move_to_end(key)
            while len(sh.cache) > sh.thread_cache_size:
                sh.cache.popitem(last=False)

    def _remember_put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                      next_config: RunnableConfig) -> None:
        # On every healthy put: keep a snapshot (shallow copies, as PostgresSaver.put makes) and
        # build the CheckpointTuple only if a degraded read ever needs it (_as_tuple).
        snapshot = {**checkpoint, "channel_values": checkpoint["channel_values"].copy(),
                    "channel_versions": checkpoint["channel_versions"].copy()}
        self._remember(_RememberedPut(next_config, snapshot, config, metadata))

    def _remember_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str) -> None:
        sh = self._shared
        thread_id, ns, checkpoint_id = _thread_of(config)
        with sh.cache_lock:
            current = sh.cache.get((thread_id, ns))
            if current is not None and current.config["configurable"]["checkpoint_id"] == checkpoint_id:
                # A new list: the cached tuple may be the very object a caller got from get_tuple.
                sh.cache[(thread_id, ns)] = current._replace(pending_writes=[
                    *(current.pending_writes or []), *((task_id, channel, value) for channel, value in writes)])

    def _seed(self, thread_id: str | None) -> None:
        """Copy what PostgreSQL had for a thread (or every cached thread) into the memory buffer.

        Called under the shared lock, only while degraded. Not logged for resync: it is in PostgreSQL.
        """
        sh = self._shared
        with sh.cache_lock:
            tuples = [_as_tuple(t) for (tid, _), t in sh.cache.items() if (thread_id is None or tid == thread_id)
                      and tid not in sh.seeded and tid not in sh.tombstoned]  # never seed an erased thread
        for tup in tuples:
            tid, ns, checkpoint_id = _thread_of(tup.config)
            if sh.memory.storage.get(tid, {}).get(ns, {}).get(checkpoint_id) is None:
                parent = tup.parent_config or {"configurable": {"thread_id": tid, "checkpoint_ns": ns}}
                self._memory.put(parent, tup.checkpoint, tup.metadata, tup.checkpoint["channel_versions"])
                by_task: dict[str, list[tuple[str, Any]]] = {}
                for task_id, channel, value in tup.pending_writes or []:
                    by_task.setdefault(task_id, []).append((channel, value))
                for task_id, writes in by_task.items():
                    self._memory.put_writes(tup.config, writes, task_id)
        if thread_id is None:
            sh.seeded.update(tid for (tid, _) in list(sh.cache))
        else:
            sh.seeded.add(thread_id)

    # --- degraded paths (memory buffer + resync log) ----------------------------------------

    def _degraded_get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        sh = self._shared
        thread_id, _, checkpoint_id = _thread_of(config)
        with sh.lock:
            if not sh.degraded:
                return None  # recovered meanwhile: caller retries PostgreSQL
            self._seed(thread_id)
            found = self._memory.get_tuple(config)
        if found is None and checkpoint_id:
            raise CheckpointUnavailable(
                f"checkpoint {checkpoint_id} of thread {thread_id} is not in this replica's buffer and "
                f"PostgreSQL is unreachable")
        return found

    def _degraded_list(self, config: RunnableConfig | None, **kwargs: Any) -> list[CheckpointTuple] | None:
        sh = self._shared
        with sh.lock:
            if not sh.degraded:
                return None
            self._seed(str(config["configurable"]["thread_id"]) if config and config["configurable"].get("thread_id") is not None else None)
            return list(self._memory.list(config, **kwargs))

    def _buffer(self, kind: str, config: RunnableConfig | None, apply: Callable[[], Any], rows: Any) -> tuple[bool, Any]:
        """Apply to memory and append to the resync log, atomically; (False, None) if no longer degraded."""
        sh = self._shared
        with sh.lock:
            if not sh.degraded:
                return False, None
            if config is not None:
                self._seed(_thread_of(config)[0])
            result = apply()
            sh.ops.append((kind, rows))
            if kind == "put":
                sh.episode_checkpoints += 1
            elif kind == "put_writes":
                sh.episode_writes += 1
            return True, result

    def _put_rows(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                  new_versions: ChannelVersions) -> tuple[list[tuple], tuple]:
        """The blob rows and the checkpoint row `PostgresSaver.put` would write, serialized now.

        Same split as PostgresSaver.put: primitives stay inline in the checkpoint JSON, the rest
        (and delta snapshots) go to checkpoint_blobs. The JSON is copied now, since the run goes on
        mutating its dicts after the call.
        """
        pg = self._postgres.sync()
        conf = config["configurable"]
        thread_id, ns, parent_id = conf["thread_id"], conf["checkpoint_ns"], conf.get("checkpoint_id")
        inline = {**checkpoint, "channel_values": dict(checkpoint["channel_values"])}
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
        blobs = pg._dump_blobs(thread_id, ns, blob_values, blob_versions) if blob_versions else []
        row = (thread_id, ns, checkpoint["id"], parent_id, json.loads(json.dumps(inline)),
               json.loads(json.dumps(get_serializable_checkpoint_metadata(config, metadata))))
        return blobs, row

    def _buffer_put(self, config, checkpoint, metadata, new_versions) -> tuple[bool, Any]:
        rows = self._put_rows(config, checkpoint, metadata, new_versions)
        conf = config["configurable"]
        next_config = {"configurable": {"thread_id": conf["thread_id"], "checkpoint_ns": conf["checkpoint_ns"],
                                        "checkpoint_id": checkpoint["id"]}}

        def apply() -> RunnableConfig:
            self._memory.put(config, checkpoint, metadata, new_versions)
            # The read cache follows the buffer: after the resync it is what PostgreSQL has, so a
            # thread idle until the next outage is not seeded from before this one (issue 16 #1).
            self._remember_put(config, checkpoint, metadata, next_config)
            return next_config

        return self._buffer("put", config, apply, rows)

    def _buffer_writes(self, config, writes, task_id, task_path) -> tuple[bool, Any]:
        conf = config["configurable"]
        upsert = all(w[0] in WRITES_IDX_MAP for w in writes)
        rows = (upsert, self._postgres.sync()._dump_writes(conf["thread_id"], conf["checkpoint_ns"], conf["checkpoint_id"],
                                                task_id, task_path, writes))
        def apply() -> None:
            self._memory.put_writes(config, writes, task_id, task_path)
            self._remember_writes(config, writes, task_id)

        return self._buffer("put_writes", config, apply, rows)

    def _buffer_delete(self, thread_id: str) -> tuple[bool, Any]:
        sh = self._shared

        def apply() -> None:
            self._memory.delete_thread(thread_id)
            with sh.cache_lock:
                for key in [k for k in sh.cache if k[0] == str(thread_id)]:
                    del sh.cache[key]
            sh.seeded.add(str(thread_id))

        return self._buffer("delete_thread", None, apply, str(thread_id))

    def _learn_tombstones(self, thread_ids: list[str]) -> None:
        """Erased threads (core_thread_tombstones): out of the read cache, never seeded again."""
        sh = self._shared
        new = set(thread_ids) - sh.tombstoned
        if not new:
            return
        with sh.lock:
            sh.tombstoned |= new
        with sh.cache_lock:
            for key in [k for k in sh.cache if k[0] in new]:
                del sh.cache[key]

    def _forget_thread(self, thread_id: str) -> None:
        sh = self._shared
        with sh.cache_lock:
            for key in [k for k in sh.cache if k[0] == str(thread_id)]:
                del sh.cache[key]
