"""The plan of a history prune (core/storage/prune.py): which checkpoints, writes and blobs of one thread go,
from their keys alone. Pure: the batch reads the rows, this decides, the batch deletes."""

from __future__ import annotations

from dataclasses import dataclass, field

TASKS = "__pregel_tasks"  # langgraph's channel of pending sends (pre-v4 checkpoints read them from their parent)


@dataclass
class Checkpoint:
    """What the plan needs of one checkpoint row (no payload)."""

    ns: str
    id: str
    parent: str | None
    versions: dict[str, str]
    value_keys: frozenset[str]  # channels with a value inline in the checkpoint (or the snapshot marker `true`)
    true_keys: frozenset[
        str
    ]  # channels whose inline value is `true` (a DeltaChannel snapshot marker if a blob is there)
    delta_counters: frozenset[str]  # channels named in metadata `counters_since_delta_snapshot`
    v: int
    bytes: int
    after_cut: bool = False
    root: str | None = None  # metadata parents[""]: the root graph's checkpoint a subgraph call started from
    unextracted: bool = False  # not read yet by the extraction (tool calls, token usage): kept


@dataclass
class ThreadPlan:
    thread_id: str
    delete: dict[str, list[str]] = field(default_factory=dict)  # ns -> checkpoint ids
    orphaned_parents: list[tuple[str, str, str]] = field(default_factory=list)  # (ns, kept id, deleted parent)
    blobs: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # ns -> (channel, version)
    checkpoints: int = 0
    writes: int = 0
    blob_count: int = 0
    bytes: int = 0
    blob_bytes: int = 0  # of `bytes`, the blobs'


def plan_thread(
    thread_id: str,
    rows: list[Checkpoint],
    keep_latest: int,
    blobs: dict[tuple[str, str, str], int],
    writes: dict[tuple[str, str], tuple[int, int, bool]],
) -> ThreadPlan:
    """What pruning `thread_id` deletes. `rows`: its checkpoints; `blobs`: (ns, channel, version) -> bytes of its
    non-empty blobs; `writes`: (ns, checkpoint_id) -> (count, bytes, has a `__pregel_tasks` write)."""
    plan = ThreadPlan(thread_id)
    by_ns: dict[str, list[Checkpoint]] = {}
    for row in rows:
        by_ns.setdefault(row.ns, []).append(row)
    root_ids, root_deleted = {r.id for r in by_ns.get("", ())}, set()
    for ns in sorted(by_ns):  # the root namespace "" first: a subgraph call's namespace follows its root checkpoint
        ns_rows = by_ns[ns]
        index = {r.id: r for r in ns_rows}
        history = sorted((r for r in ns_rows if not r.after_cut), key=lambda r: r.id, reverse=True)
        # A subgraph call's namespace (`node:task_id`, unlike a `checkpointer=True` subgraph's, whose state outlives
        # each call) goes whole with the root checkpoint its call started from, once that one is saved and deleted
        # now, as langgraph's own keep_latest does; otherwise it keeps its latest like any namespace.
        call_done = (
            ":" in ns
            and len(history) == len(ns_rows)
            and all(r.root in root_ids and r.root in root_deleted and not r.unextracted for r in ns_rows)
        )
        if len(history) <= keep_latest and not call_done:
            continue
        kept = (
            set()
            if call_done
            else {r.id for r in ns_rows if r.after_cut or r.unextracted} | {r.id for r in history[:keep_latest]}
        )
        delta = set().union(*(r.delta_counters for r in ns_rows)) | {
            c for r in ns_rows for c in r.true_keys if (ns, c, r.versions.get(c)) in blobs
        }

        def has_value(r: Checkpoint, channel: str, ns: str = ns) -> bool:
            return channel in r.value_keys or (ns, channel, r.versions.get(channel)) in blobs

        todo = list(kept)
        while todo:
            r = index[todo.pop()]
            needed: list[str] = []
            if r.v < 4 and r.parent and writes.get((ns, r.parent), (0, 0, False))[2]:
                needed.append(r.parent)  # its pending sends
            for channel in delta & r.versions.keys():
                walk = r
                while not has_value(walk, channel) and walk.parent in index:
                    walk = index[walk.parent]
                    needed.append(walk.id)
            for cid in needed:
                if cid not in kept:
                    kept.add(cid)
                    todo.append(cid)
        deleted = [r for r in history if r.id not in kept]
        if not deleted:
            continue
        deleted_ids = {r.id for r in deleted}
        plan.delete[ns] = sorted(deleted_ids)
        if ns == "":
            root_deleted = deleted_ids
        plan.orphaned_parents += [
            (ns, cid, parent)
            for cid in sorted(kept)
            if (parent := index[cid].parent) is not None and parent in deleted_ids
        ]
        referenced = {(c, v) for cid in kept for c, v in index[cid].versions.items()}
        freed = {(c, v) for r in deleted for c, v in r.versions.items()} - referenced
        plan.blobs[ns] = sorted(k for k in freed if (ns, *k) in blobs)
        plan.checkpoints += len(deleted)
        plan.blob_count += len(plan.blobs[ns])
        plan.blob_bytes += sum(blobs[(ns, *k)] for k in plan.blobs[ns])
        plan.bytes += sum(r.bytes for r in deleted) + sum(blobs[(ns, *k)] for k in plan.blobs[ns])
        for r in deleted:
            count, size, _ = writes.get((ns, r.id), (0, 0, False))
            plan.writes += count
            plan.bytes += size
    return plan
