"""The read cache of the degraded buffer: the latest checkpoint of each recent thread as PostgreSQL has it,
what a degraded read starts from."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection, Sequence
from typing import Any, NamedTuple

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)


def thread_of(config: RunnableConfig) -> tuple[str, str, str | None]:
    """(thread_id, checkpoint_ns, checkpoint_id or None) of a config."""
    conf = config["configurable"]
    return str(conf["thread_id"]), conf.get("checkpoint_ns", ""), get_checkpoint_id(config)


class _RememberedPut(NamedTuple):
    """A put as the cache keeps it: `config` is the checkpoint's own and `pending_writes` its writes (as in
    a CheckpointTuple); `put_config` and `metadata` are what the put was given."""

    config: RunnableConfig
    checkpoint: Checkpoint
    put_config: RunnableConfig
    metadata: CheckpointMetadata
    pending_writes: Sequence[tuple[str, str, Any]] = ()


def _as_tuple(entry: CheckpointTuple | _RememberedPut) -> CheckpointTuple:
    """The CheckpointTuple that PostgresSaver would return for a cached entry."""
    if isinstance(entry, CheckpointTuple):
        return entry
    thread_id, ns, parent_id = thread_of(entry.put_config)
    parent: RunnableConfig | None = (
        {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent_id}}
        if parent_id
        else None
    )
    return CheckpointTuple(
        entry.config,
        entry.checkpoint,
        get_serializable_checkpoint_metadata(entry.put_config, entry.metadata),
        parent,
        list(entry.pending_writes),
    )


class ReadCache:
    """The latest checkpoint (and its writes) of each of the last `size` threads (and namespaces) read or
    written. Healthy calls keep it on their hot path: a snapshot on every put, the tuple built only if a
    degraded read ever needs it."""

    def __init__(self, size: int):
        self._size = size
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str], CheckpointTuple | _RememberedPut] = OrderedDict()

    def remember(self, tup: CheckpointTuple | _RememberedPut | None) -> None:
        if tup is None:
            return
        conf = tup.config["configurable"]
        key = (str(conf["thread_id"]), conf.get("checkpoint_ns", ""))
        current = self._entries.get(key)
        if current is not None and current.config["configurable"]["checkpoint_id"] == conf["checkpoint_id"]:
            return  # already known (a plain dict read: no lock needed on this hot path)
        with self._lock:
            current = self._entries.get(key)
            if (
                current is not None
                and current.config["configurable"]["checkpoint_id"] > tup.config["configurable"]["checkpoint_id"]
            ):
                return
            self._entries[key] = tup
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def remember_put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, next_config: RunnableConfig
    ) -> None:
        # A snapshot (shallow copies, as PostgresSaver.put makes); the CheckpointTuple is built only
        # if a degraded read ever needs it (_as_tuple).
        snapshot: Checkpoint = {
            **checkpoint,
            "channel_values": checkpoint["channel_values"].copy(),
            "channel_versions": checkpoint["channel_versions"].copy(),
        }
        self.remember(_RememberedPut(next_config, snapshot, config, metadata))

    def remember_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str) -> None:
        thread_id, ns, checkpoint_id = thread_of(config)
        with self._lock:
            current = self._entries.get((thread_id, ns))
            if current is not None and current.config["configurable"]["checkpoint_id"] == checkpoint_id:
                # A new list: the cached tuple may be the very object a caller got from get_tuple.
                self._entries[(thread_id, ns)] = current._replace(
                    pending_writes=[
                        *(current.pending_writes or []),
                        *((task_id, channel, value) for channel, value in writes),
                    ]
                )

    def forget(self, thread_ids: Collection[str]) -> None:
        with self._lock:
            for key in [k for k in self._entries if k[0] in thread_ids]:
                del self._entries[key]

    def tuples(self, thread_id: str | None, *, skip: Collection[str]) -> list[CheckpointTuple]:
        """The cached checkpoints of `thread_id` (of every thread when None), but those of threads in `skip`."""
        with self._lock:
            return [
                _as_tuple(t)
                for (tid, _), t in self._entries.items()
                if (thread_id is None or tid == thread_id) and tid not in skip
            ]

    def threads(self) -> set[str]:
        with self._lock:
            return {tid for tid, _ in self._entries}
