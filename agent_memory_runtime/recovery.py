"""Recovery, PostgreSQL's side: the probe that says PostgreSQL answers again, and the replay (resync) of
buffered operations with PostgresSaver's own statements, one transaction per replay, with what happens
to each buffered thread (agent_memory_runtime.thread_fates) and the resync's counters.

Each buffered operation carries an id. A replay claims the ids of what it writes in
`core_replayed_operations` (migration 115) in its own transaction and skips an operation whose id is
there already: a journal still holding committed operations (a crash between a replay's commit and
the journal's rewrite or removal) applies nothing twice. A buffered delete that conflicts with a
newer turn (thread_fates) is kept in `core_checkpoint_dead_letters` in the same transaction."""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime
from typing import Any

import psycopg
from langgraph.checkpoint.postgres.base import BasePostgresSaver
from psycopg.types.json import Jsonb

from agent_memory_runtime import journal, metrics
from agent_memory_runtime.deadlines import _Watchdog
from agent_memory_runtime.failures import PROBE_CONNECT_TIMEOUT_S, PROBE_LOG_EVERY_S, DeadlineExceeded, _describe
from agent_memory_runtime.pool import CONNECTION_KWARGS
from agent_memory_runtime.thread_fates import ThreadFates, op_thread

log = logging.getLogger("agent_memory_runtime.dual_saver")

OUR_TABLES_SQL = """
SELECT to_regclass('core_replayed_operations') IS NOT NULL AS replayed,
       to_regclass('core_checkpoint_dead_letters') IS NOT NULL AS dead_letters"""
# The ids not claimed yet: those this transaction applies (a concurrent replay of the same id waits for ours).
CLAIM_SQL = """
INSERT INTO core_replayed_operations (op_id, replica_id) SELECT unnest(%s::uuid[]), %s
ON CONFLICT DO NOTHING RETURNING op_id::text AS op_id"""
# A journal is replayed at its replica's next start: ids older than this are never asked for again.
FORGET_CLAIMS_SQL = """
DELETE FROM core_replayed_operations WHERE op_id IN (
    SELECT op_id FROM core_replayed_operations WHERE applied_at < now() - interval '90 days'
    LIMIT 10000 FOR UPDATE SKIP LOCKED)"""
INSERT_DEAD_LETTER_SQL = """
INSERT INTO core_checkpoint_dead_letters (replica_id, thread_id, kind, error, payload) VALUES (%s, %s, %s, %s, %s)"""


def op_parts(op: Any) -> tuple[str, Any, str | None]:
    """(kind, payload, id) of a buffered operation; a journal of a release before ids has none."""
    return op[0], op[1], op[2] if len(op) > 2 else None


class Recovery:
    """Probe and replay. It keeps the fates of the current episode's threads (replayed to themselves,
    diverted to a conflict thread, or dropped when erased) across the rounds of its resyncs, from
    `new_episode()` on."""

    def __init__(
        self,
        dsn: str,
        resync_dsn: str,
        *,
        replica_id: str,
        call_timeout: float,
        resync_timeout: float,
        watchdog: _Watchdog,
    ):
        self._dsn = dsn
        # The replay is the monitor's own work under its resync_timeout deadline: it may wait on a lock
        # for that long (the DSN has the TCP settings only, no statement/lock timeout).
        self._resync_dsn = resync_dsn
        self._replica_id = replica_id
        self._call_timeout = call_timeout
        self._resync_timeout = resync_timeout
        self._watchdog = watchdog
        self._lock = threading.Lock()
        # Per (thread, ns) this episode: the thread its buffered operations replay to, None if erased.
        self._fates: dict[tuple[str, str], str | None] = {}
        self._last_probe_error: str | None = None
        self._last_probe_logged = 0.0
        self.resyncing = False  # a resync is replaying the buffer (outside the buffer's lock)
        self._last_resync_ms: float | None = None
        self._last_resync_error: str | None = None
        # Monotonic counters (never reset while the process lives).
        self._resynced_ops_total = 0
        self._resyncs_total = 0
        self._resync_seconds_total = 0.0
        self._conflicts_total = 0
        self._tombstoned_threads_total = 0
        self._tombstoned_ops_dropped_total = 0
        self._already_applied_total = 0
        self._tables: dict[str, bool] | None = None  # our tables present (OUR_TABLES_SQL)

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                "resyncing": self.resyncing,
                "last_resync_ms": self._last_resync_ms,
                "last_resync_error": self._last_resync_error,
                "resynced_ops_total": self._resynced_ops_total,
                "resyncs_total": self._resyncs_total,
                "resync_seconds_total": self._resync_seconds_total,
                "conflicts_total": self._conflicts_total,
                "tombstoned_threads_total": self._tombstoned_threads_total,
                "tombstoned_ops_dropped_total": self._tombstoned_ops_dropped_total,
                "already_applied_total": self._already_applied_total,
            }

    @property
    def last_resync_ms(self) -> float | None:
        return self._last_resync_ms

    # --- probe ------------------------------------------------------------------------------------

    def probe(self, *, degraded_since: datetime | None, buffered: int) -> bool:
        """True when PostgreSQL answers on a direct connection. A failure is logged once per episode and
        cause, then every PROBE_LOG_EVERY_S: visible, not one line per probe."""
        try:
            with (
                self._watchdog.deadline(PROBE_CONNECT_TIMEOUT_S + self._call_timeout),
                psycopg.connect(self._dsn, connect_timeout=PROBE_CONNECT_TIMEOUT_S, autocommit=True) as conn,
                self._watchdog.watching(conn),
            ):
                conn.execute("SELECT 1")
        except (psycopg.Error, DeadlineExceeded) as exc:
            message, now = _describe(exc), time.monotonic()
            if message != self._last_probe_error or now - self._last_probe_logged >= PROBE_LOG_EVERY_S:
                self._last_probe_error, self._last_probe_logged = message, now
                log.warning(
                    "replica %s: PostgreSQL probe failed, still degraded (since %s, %d operations buffered): %s",
                    self._replica_id,
                    degraded_since,
                    buffered,
                    message,
                )
            return False
        self._last_probe_error = None
        return True

    # --- the resync's outcome -----------------------------------------------------------------------

    def new_episode(self) -> None:
        """The saver degraded: the threads of this episode are decided afresh."""
        with self._lock:
            self._fates = {}

    def resync_failed(self, message: str) -> None:
        """A resync round failed or did not drain the buffer in time: what it did not commit is kept."""
        with self._lock:
            self._last_resync_error = message

    def resynced(self, ops: int, seconds: float) -> None:
        """A resync wrote the whole buffer (`ops` operations over its rounds): the episode is over."""
        with self._lock:
            self._last_resync_ms = seconds * 1000
            self._resynced_ops_total += ops
            self._resyncs_total += 1
            self._resync_seconds_total += seconds
            self._last_resync_error = None

    def journal_replayed(self, ops: int) -> None:
        """Operations of an earlier run's journal are in PostgreSQL."""
        with self._lock:
            self._resynced_ops_total += ops

    def dead_letter(self, op: Any, error: BaseException) -> None:
        """Keep a buffered operation PostgreSQL refused (not a connection failure) in
        core_checkpoint_dead_letters, as the saver stored it, and claim its id in the same transaction (never
        kept twice); raises if the row cannot be written."""
        kind, payload, op_id = op_parts(op)
        thread_id = op_thread(kind, payload)
        with (
            psycopg.connect(self._resync_dsn, **CONNECTION_KWARGS) as conn,
            self._watchdog.watching(conn),
            conn.transaction(),
        ):
            with conn.cursor() as cur:
                if not op_id or self._claim(cur, [op_id]):
                    cur.execute(
                        INSERT_DEAD_LETTER_SQL,
                        (self._replica_id, thread_id, kind, _describe(error), journal.pack(list(op))),
                    )
        log.error(
            "replica %s: PostgreSQL refused a buffered %s of thread %r on replay (%s): moved to "
            "core_checkpoint_dead_letters, the rest of the buffer goes on",
            self._replica_id,
            kind,
            thread_id,
            _describe(error),
        )

    def _our_tables(self, cur: Any) -> dict[str, bool]:
        """Whether migrations 115 and 070 ran (asked until they have: a database may be migrated meanwhile)."""
        if self._tables is None or not all(self._tables.values()):
            self._tables = dict(cur.execute(OUR_TABLES_SQL).fetchone())
            if not self._tables["replayed"]:
                log.warning(
                    "replica %s: core_replayed_operations is missing (migration 115 not applied): a replay after a "
                    "crash between a resync's commit and its journal's rewrite may apply operations twice",
                    self._replica_id,
                )
        return self._tables

    def _claim(self, cur: Any, op_ids: list[str]) -> set[str]:
        """The ids of `op_ids` no replay has applied yet, claimed in `cur`'s transaction (all of them without
        migration 115)."""
        if not op_ids or not self._our_tables(cur)["replayed"]:
            return set(op_ids)
        cur.execute(FORGET_CLAIMS_SQL)
        return {row["op_id"] for row in cur.execute(CLAIM_SQL, (op_ids, self._replica_id)).fetchall()}

    # --- replay ----------------------------------------------------------------------------------

    def replay(
        self, ops: list[Any], *, since: datetime | None, tombstoned: frozenset[str], episode: bool = True
    ) -> set[str]:
        """Write buffered operations in one transaction with PostgresSaver's own upsert statements; returns
        the erased threads whose operations it dropped.

        Consecutive puts/writes are sent as batches; a thread deletion flushes what came before it,
        so the result is that of the operations applied one by one, in order. Re-running it
        (after a failed commit, or over rows an abandoned call wrote meanwhile) changes nothing.
        `since` is when the buffer's episode began; `episode=False` (a journal from an earlier run)
        keeps its thread fates apart from the current episode's.

        Before the first buffered checkpoint of a thread (this episode) it checks the thread in
        PostgreSQL (`thread_fates.ThreadFates`): an erased thread (tombstone) is dropped; a thread whose
        head is not the checkpoint the buffered turns were based on (another replica wrote it, or
        this replica never knew it) is written to a conflict thread instead of on top of the head. A
        delete whose thread was written after it is not applied and goes to the dead letters. An operation
        a replay already committed (its id claimed) is skipped.
        """
        if not ops:
            return set()
        sql = BasePostgresSaver
        with self._lock:
            decided = dict(self._fates) if episode else {}
        fates = ThreadFates(ops, decided=decided, since=since, replica_id=self._replica_id, tombstoned=tombstoned)
        skipped = 0

        def run() -> None:
            nonlocal skipped
            with (
                psycopg.connect(self._resync_dsn, **CONNECTION_KWARGS) as conn,
                self._watchdog.watching(conn),
                conn.transaction(),
            ):
                with conn.cursor() as cur:
                    unapplied = self._claim(cur, [op_id for _, _, op_id in map(op_parts, ops) if op_id])
                    blobs: list[tuple] = []
                    checkpoints: list[tuple] = []
                    upserts: list[tuple] = []
                    inserts: list[tuple] = []

                    def flush() -> None:
                        for statement, rows in (
                            (sql.UPSERT_CHECKPOINT_BLOBS_SQL, blobs),
                            (sql.UPSERT_CHECKPOINTS_SQL, checkpoints),
                            (sql.UPSERT_CHECKPOINT_WRITES_SQL, upserts),
                            (sql.INSERT_CHECKPOINT_WRITES_SQL, inserts),
                        ):
                            if rows:
                                cur.executemany(statement, rows)
                                rows.clear()

                    for kind, payload, op_id in map(op_parts, ops):
                        if op_id is not None:
                            if op_id not in unapplied:  # committed by an earlier replay
                                skipped += 1
                                continue
                            unapplied.discard(op_id)  # (the same operation twice in a journal: once)
                        if kind == "put":
                            blob_rows, (thread_id, ns, checkpoint_id, parent_id, inline, metadata) = payload
                            target = fates.target(cur, thread_id, ns, parent_id)
                            if target is None:
                                continue
                            blobs.extend((target, *row[1:]) for row in blob_rows)
                            checkpoints.append((target, ns, checkpoint_id, parent_id, Jsonb(inline), Jsonb(metadata)))
                        elif kind == "put_writes":
                            upsert, rows = payload
                            if not rows:
                                continue
                            target = fates.target(cur, rows[0][0], rows[0][1], None, writes=True)
                            if target is None:
                                continue
                            (upserts if upsert else inserts).extend((target, *row[1:]) for row in rows)
                        elif kind == "delete_thread":
                            flush()
                            conflict = fates.delete(cur, payload)
                            if conflict is not None and self._our_tables(cur)["dead_letters"]:
                                cur.execute(
                                    INSERT_DEAD_LETTER_SQL,
                                    (
                                        self._replica_id,
                                        op_thread(kind, payload),
                                        kind,
                                        conflict,
                                        journal.pack([kind, payload, op_id]),
                                    ),
                                )
                        else:  # pragma: no cover - the log only holds the kinds above
                            raise ValueError(f"unknown buffered operation {kind!r}")
                    flush()

        with self._watchdog.deadline(self._resync_timeout):
            run()
        with self._lock:  # committed: keep what was decided, count what happened
            if episode:
                self._fates = fates.decided
            self._conflicts_total += len(fates.conflicts) + len(fates.delete_conflicts)
            self._already_applied_total += skipped
            self._tombstoned_threads_total += len(fates.erased)
            self._tombstoned_ops_dropped_total += fates.dropped
        fates.log()
        metrics.dead_lettered(len(fates.delete_conflicts))
        if skipped:
            log.warning(
                "replica %s skipped %d buffered operations a replay had already committed (a crash before the "
                "journal was rewritten): none applied twice",
                self._replica_id,
                skipped,
            )
        return fates.erased
