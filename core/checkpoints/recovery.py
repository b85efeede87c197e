"""Recovery, PostgreSQL's side: the probe that says PostgreSQL answers again, and the replay (resync) of
buffered operations with PostgresSaver's own statements, one transaction per replay, with what happens
to each buffered thread (core.checkpoints.thread_fates) and the resync's counters."""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime
from typing import Any

import psycopg
from langgraph.checkpoint.postgres.base import BasePostgresSaver
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from core.checkpoints import journal
from core.checkpoints.deadlines import _Watchdog
from core.checkpoints.failures import PROBE_CONNECT_TIMEOUT_S, PROBE_LOG_EVERY_S, DeadlineExceeded, _describe
from core.checkpoints.thread_fates import ThreadFates
from core.db import CONNECT_TIMEOUT_S

log = logging.getLogger("core.checkpoints.dual_saver")


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

    def dead_letter(self, op: tuple[str, Any], error: BaseException) -> None:
        """Keep a buffered operation PostgreSQL refused (not a connection failure) in
        core_checkpoint_dead_letters, as the saver stored it; raises if the row cannot be written."""
        kind, payload = op
        thread_id = payload if kind == "delete_thread" else payload[1][0] if kind == "put" else payload[1][0][0]
        with (
            psycopg.connect(self._resync_dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn,
            self._watchdog.watching(conn),
        ):
            conn.execute(
                "INSERT INTO core_checkpoint_dead_letters (replica_id, thread_id, kind, error, payload) "
                "VALUES (%s, %s, %s, %s, %s)",
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

    # --- replay ----------------------------------------------------------------------------------

    def replay(
        self, ops: list[tuple[str, Any]], *, since: datetime | None, tombstoned: frozenset[str], episode: bool = True
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
        this replica never knew it) is written to a conflict thread instead of on top of the head.
        """
        if not ops:
            return set()
        sql = BasePostgresSaver
        with self._lock:
            decided = dict(self._fates) if episode else {}
        fates = ThreadFates(ops, decided=decided, since=since, replica_id=self._replica_id, tombstoned=tombstoned)

        def run() -> None:
            with (
                psycopg.connect(
                    self._resync_dsn,
                    autocommit=True,
                    prepare_threshold=0,
                    row_factory=dict_row,
                    connect_timeout=CONNECT_TIMEOUT_S,
                ) as conn,
                self._watchdog.watching(conn),
                conn.transaction(),
            ):
                with conn.cursor() as cur:
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

                    for kind, payload in ops:
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
                            for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
                                cur.execute(f"DELETE FROM {table} WHERE thread_id = %s", (payload,))
                            fates.deleted(payload)
                        else:  # pragma: no cover - the log only holds the kinds above
                            raise ValueError(f"unknown buffered operation {kind!r}")
                    flush()

        with self._watchdog.deadline(self._resync_timeout):
            run()
        with self._lock:  # committed: keep what was decided, count what happened
            if episode:
                self._fates = fates.decided
            self._conflicts_total += len(fates.conflicts)
            self._tombstoned_threads_total += len(fates.erased)
            self._tombstoned_ops_dropped_total += fates.dropped
        fates.log()
        return fates.erased
