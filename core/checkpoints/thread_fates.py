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
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("core.checkpoints.dual_saver")

TOMBSTONES_EXIST_SQL = "SELECT to_regclass('core_thread_tombstones') IS NOT NULL AS present"
IS_TOMBSTONED_SQL = "SELECT 1 FROM core_thread_tombstones WHERE thread_id = %s"
HEAD_SQL = """
SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s
ORDER BY checkpoint_id DESC LIMIT 1
"""
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


def conflict_thread_id(thread_id: str, replica_id: str, since: Any) -> str:
    stamp = since.strftime("%Y%m%dT%H%M%S") if since is not None else "unknown"
    return f"{thread_id}~conflict~{replica_id}~{stamp}"


class ThreadFates:
    """The fates of one replay (one transaction). `decided` holds those of earlier replays of the same
    episode; once the transaction has committed, the caller keeps `decided` and counts `conflicts`,
    `erased` and `dropped` (`log()` says what happened)."""

    def __init__(
        self,
        ops: list[tuple[str, Any]],
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
        for kind, payload in ops:
            if kind == "put":
                thread_id, ns, checkpoint_id = payload[1][:3]
                self.own_ids.setdefault((thread_id, ns), set()).add(checkpoint_id)
        self.tombstones: bool | None = None
        self.conflicts: list[tuple[tuple[str, str], str | None, str | None, str]] = []
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

    def deleted(self, thread_id: str) -> None:
        """A buffered `delete_thread` ran: what follows it starts the thread afresh (decided again)."""
        for key in [k for k in self.decided if k[0] == thread_id]:
            del self.decided[key]

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
        if self.erased:
            log.warning(
                "replica %s dropped %d buffered operations of %d erased threads (tombstones): %s",
                self.replica_id,
                self.dropped,
                len(self.erased),
                sorted(self.erased),
            )
