"""What the resync does with each buffered thread: replay it, divert it to a conflict thread, or drop it.

Decided once per thread and episode, inside the resync's transaction, before its first buffered
checkpoint is written:
- **erased** (a row in `core_thread_tombstones`, migration 010): the buffered operations are dropped,
  logged at WARNING and counted, so that a replica degraded during an erasure does not bring the
  thread back;
- **conflict**: PostgreSQL's head of the thread is neither the checkpoint the buffered turns were
  based on nor one of them (another replica wrote the thread meanwhile, or this replica never knew
  it). Written on top, the buffered turns would become the head and silently drop the others. They
  go to a thread of their own, `{thread}~conflict~{replica}~{degraded since}`, with a copy of the
  checkpoint they were based on (and the thread's blobs), logged at ERROR and counted;
- otherwise the buffered operations are replayed on the thread itself.

A buffered `delete_thread` deletes what it meant: the thread as it was when it was called. It carries
the time of the call and the head checkpoint of each namespace the replica knew then; PostgreSQL's
head of a namespace is covered when it is at most the known head or a checkpoint id langgraph gives
at that time (ids are uuid6: they sort by time). A head not covered was written after the delete
(another replica continued the thread): the thread is kept whole, nothing of it deleted (deleting
the older checkpoints would take blobs the newer ones use), and the delete is a conflict, logged at
ERROR, counted and given back to the caller (who keeps it with the dead letters). A delete journaled
by a release before this one has no time: the episode's start stands for it.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from langgraph.checkpoint.base.id import UUID

log = logging.getLogger("agent_memory_runtime.dual_saver")

TOMBSTONES_EXIST_SQL = "SELECT to_regclass('core_thread_tombstones') IS NOT NULL AS present"
IS_TOMBSTONED_SQL = "SELECT 1 FROM core_thread_tombstones WHERE thread_id = %s"
HEAD_SQL = """
SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s
ORDER BY checkpoint_id DESC LIMIT 1
"""
NS_HEADS_SQL = """
SELECT checkpoint_ns, max(checkpoint_id) AS head FROM checkpoints WHERE thread_id = %s GROUP BY checkpoint_ns
"""
DELETE_THREAD_SQL = tuple(
    f"DELETE FROM {table} WHERE thread_id = %s" for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
)
COPY_BASE_CHECKPOINT_SQL = """
INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata)
SELECT %s, checkpoint_ns, checkpoint_id, NULL, checkpoint, metadata FROM checkpoints
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
ON CONFLICT DO NOTHING
"""
COPY_BLOBS_SQL = """
INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
SELECT %s, checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs
WHERE thread_id = %s AND checkpoint_ns = %s
ON CONFLICT DO NOTHING
"""


# 100-ns intervals between the UUID epoch (1582-10-15) and the Unix epoch (langgraph.checkpoint.base.id.uuid6)
_UUID_EPOCH_OFFSET = 0x01B21DD213814000


def latest_checkpoint_id_at(at: datetime) -> str:
    """The greatest checkpoint id langgraph's uuid6 gives a checkpoint created at `at` (no later one sorts lower)."""
    at = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    timestamp = (at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 10 + _UUID_EPOCH_OFFSET
    value = ((timestamp >> 12) & 0xFFFFFFFFFFFF) << 80 | (timestamp & 0x0FFF) << 64 | 0x3FFF << 48 | 0xFFFFFFFFFFFF
    return str(UUID(int=value, version=6))


def op_thread(kind: str, payload: Any) -> str:
    """The thread of a buffered operation."""
    if kind == "delete_thread":
        return payload if isinstance(payload, str) else payload["thread_id"]
    return payload[1][0] if kind == "put" else payload[1][0][0]


def conflict_thread_id(thread_id: str, replica_id: str, since: Any) -> str:
    stamp = since.strftime("%Y%m%dT%H%M%S") if since is not None else "unknown"
    return f"{thread_id}~conflict~{replica_id}~{stamp}"


class ThreadFates:
    """The fates of one replay (one transaction). `decided` holds those of earlier replays of the same
    episode; once the transaction has committed, the caller keeps `decided` and counts `conflicts`,
    `erased` and `dropped` (`log()` says what happened)."""

    def __init__(
        self,
        ops: list[Any],
        *,
        decided: dict[tuple[str, str], str | None],
        since: Any,
        replica_id: str,
        tombstoned: frozenset[str],
    ):
        self.decided = dict(decided)
        self.since = since
        self.replica_id = replica_id
        self.tombstoned = tombstoned  # erased threads already known (tombstones seen, earlier replays)
        self.own_ids: dict[tuple[str, str], set[str]] = {}
        for kind, payload, *_ in ops:
            if kind == "put":
                thread_id, ns, checkpoint_id = payload[1][:3]
                self.own_ids.setdefault((thread_id, ns), set()).add(checkpoint_id)
        self.tombstones: bool | None = None
        self.conflicts: list[tuple[tuple[str, str], str | None, str | None, str]] = []
        self.delete_conflicts: list[tuple[str, str]] = []  # (thread, why its delete was not applied)
        self.erased: set[str] = set()
        self.dropped = 0

    def _tombstoned(self, cur: Any, thread_id: str) -> bool:
        if self.tombstones is None:
            self.tombstones = bool(cur.execute(TOMBSTONES_EXIST_SQL).fetchone()["present"])
        return self.tombstones and cur.execute(IS_TOMBSTONED_SQL, (thread_id,)).fetchone() is not None

    def target(self, cur: Any, thread_id: str, ns: str, parent_id: str | None, *, writes: bool = False) -> str | None:
        """The thread to write this operation to, or None to drop it (erased thread)."""
        key = (thread_id, ns)
        if key in self.decided:
            target = self.decided[key]
        elif thread_id in self.tombstoned or self._tombstoned(cur, thread_id):
            self.decided[key] = target = None
            self.erased.add(thread_id)
        elif writes:  # writes on a checkpoint before any buffered one: decided by the next put
            return thread_id
        else:
            row = cur.execute(HEAD_SQL, (thread_id, ns)).fetchone()
            head = row["checkpoint_id"] if row else None
            if head == parent_id or head in self.own_ids.get(key, ()):
                target = thread_id
            else:
                target = conflict_thread_id(thread_id, self.replica_id, self.since)
                if parent_id is not None:
                    cur.execute(COPY_BASE_CHECKPOINT_SQL, (target, thread_id, ns, parent_id))
                cur.execute(COPY_BLOBS_SQL, (target, thread_id, ns))
                self.conflicts.append((key, head, parent_id, target))
            self.decided[key] = target
        if target is None:
            self.dropped += 1
        return target

    def delete(self, cur: Any, payload: Any) -> str | None:
        """Apply a buffered `delete_thread` to what it meant; None once done, else why it was not (a conflict:
        the thread is kept as it is). What follows a done delete starts the thread afresh (decided again)."""
        if isinstance(payload, str):  # journaled before deletes carried their time: the episode's start
            thread_id, at, heads = payload, self.since, {}
        else:
            thread_id, at, heads = payload["thread_id"], payload["at"], payload["heads"]
        bound = latest_checkpoint_id_at(at) if at is not None else ""
        newer = [
            (row["checkpoint_ns"], row["head"])
            for row in cur.execute(NS_HEADS_SQL, (thread_id,)).fetchall()
            if row["head"] > max(bound, heads.get(row["checkpoint_ns"]) or "")
        ]
        if newer:
            ns, head = newer[0]
            why = (
                f"conflict: thread {thread_id!r} was written after this delete was buffered by replica "
                f"{self.replica_id} at {at} (head {head} of namespace {ns!r}, newer than the "
                f"{heads.get(ns) or 'no'} checkpoint it knew); the delete was not applied and the thread is kept "
                f"whole: delete it again if it must go"
            )
            self.delete_conflicts.append((thread_id, why))
            return why
        for statement in DELETE_THREAD_SQL:
            cur.execute(statement, (thread_id,))
        for key in [k for k in self.decided if k[0] == thread_id]:
            del self.decided[key]
        return None

    def log(self) -> None:
        for (thread_id, ns), head, base, target in self.conflicts:
            log.error(
                "thread %r (ns %r) changed in PostgreSQL while replica %s was degraded (head %s, buffered "
                "turns based on %s): the buffered turns are kept in thread %r, not put on top of the head",
                thread_id,
                ns,
                self.replica_id,
                head,
                base,
                target,
            )
        for thread_id, why in self.delete_conflicts:
            log.error(
                "replica %s: buffered delete of thread %r not applied on replay: %s", self.replica_id, thread_id, why
            )
        if self.erased:
            log.warning(
                "replica %s dropped %d buffered operations of %d erased threads (tombstones): %s",
                self.replica_id,
                self.dropped,
                len(self.erased),
                sorted(self.erased),
            )
