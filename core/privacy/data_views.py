"""Who looked at a customer's data: the dashboard's views of a customer's memory, threads and access previews or
exports, one row each in `core_data_views` (migration 085), hash-chained like the registers (chain 'views',
core/privacy/chain.py).

Logging never blocks a page: `record` puts the views in this process's bounded queue (one per database) and
returns; a background thread writes them every FLUSH_EVERY_S (or FLUSH_ROWS at once) in one multi-row INSERT through
the pool, under short timeouts, each row with the time it was viewed and sealed in the chain by the table's trigger
(in insertion order). While the database does not take them (down, hung, locked) they wait and are retried every
RETRY_EVERY_S; at exit the queue is flushed for up to EXIT_WAIT_S. Views that do not fit in the queue, or are still
in it at exit, are counted (`agent_memory_data_view_log_failures_total`, an ERROR log line) and, at the next write
that succeeds, recorded in `core_data_view_gaps` (migration 087) in the same transaction: the DPO's page says "N views
were not recorded since ..." (`unrecorded`).

A SIGKILL (an OOM kill, a node lost) loses the queue and that count with it, so each process keeps a marker row in
`core_data_view_writers` (migration 125) while it records: written synchronously when its queue starts (the first
view of a process pays that one short write, under the writer's timeouts), moved on with each batch written
(`flushed_through`: every view of the process viewed before it is written) and refreshed every HEARTBEAT_S even when
idle, deleted at a clean exit that lost nothing. The next queue to start, in any process, turns the markers of
processes that are gone (on its host, the pid is not alive or is its own; on any host, no heartbeat for
STALE_AFTER_S) into gaps of an unknown number of views (`views` NULL) by host:pid between `flushed_through` and the
time it was found, which the DPO's page names (`Unrecorded.crashes`). A marker rather than a local fsynced spool: a
spool fsyncs on a page's path or loses its own last moments, lives on a pod's disk that a lost node or a rescheduled
pod takes with it, and needs a replay; the marker costs one short write per process start and none per view, and
survives whatever kills the process. A process that could not write its marker (the database down at start) writes
it with its first batch: views it loses before that are known only to its log. A live process whose database refuses
writes for longer than STALE_AFTER_S may be declared gone: its views then arrive after the gap that counted them (the
DPO is warned of more than was lost, never of less).

Rows name ids only (namespace, thread, customer), never a value of the customer's data; the purpose typed by the
viewer may hold some, and an erasure of the customer redacts it (migration 088); an erasure keeps the rows
(core.privacy.evidence.PROTECTED_TABLES) as it keeps the registers. The sweep job deletes rows older than the
configured retention with their chain links and records the cut (`sweep_step`).
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import psycopg
from prometheus_client import Counter

from core.db import Database, DatabaseUnavailable, one

log = logging.getLogger(__name__)

KINDS = ("namespace", "thread", "search", "access_preview", "access_export", "refused")
MAX_TEXT = 1000
CUSTOMER_ROOT = "clientes"

QUEUE_CAPACITY = 10_000  # views waiting per process and database; more are not recorded (counted, recorded as a gap)
FLUSH_EVERY_S = 0.2  # a view waits at most this long for others to share its INSERT
FLUSH_ROWS = 500  # ... or until this many are waiting
RETRY_EVERY_S = 1.0  # after a failed write
EXIT_WAIT_S = 5.0  # at exit: how long the last writes may take
HEARTBEAT_S = 60.0  # a running process refreshes its marker at least this often
STALE_AFTER_S = 600.0  # a marker on another host without a heartbeat for this long is of a process that is gone

LOG_FAILURES = Counter(
    "agent_memory_data_view_log_failures",
    "Views of customer data the dashboard could not record (queue full or still queued at exit; the page was shown).",
)

# Bounded: a slow or locked database holds the writer thread (never a page) at most this long per attempt.
LOG_TIMEOUTS = "SELECT set_config('statement_timeout', '2s', true), set_config('lock_timeout', '1s', true)"
INSERT_VIEWS = """
INSERT INTO core_data_views (viewed_at, viewer, role, kind, customer_id, target, purpose)
SELECT coalesce(at, now()), viewer, role, kind, customer_id, target, purpose
FROM unnest(%(at)s::timestamptz[], %(viewer)s::text[], %(role)s::text[], %(kind)s::text[], %(customer)s::text[],
            %(target)s::text[], %(purpose)s::text[]) AS v(at, viewer, role, kind, customer_id, target, purpose)"""
INSERT_GAP = """
INSERT INTO core_data_view_gaps (views, since, until, process, reason)
VALUES (%(views)s, %(since)s, %(until)s, %(process)s, %(reason)s)"""
SELECT_GAPS = """
SELECT coalesce(sum(views), 0) AS views, min(since) FILTER (WHERE views IS NOT NULL) AS since,
       count(*) FILTER (WHERE views IS NULL) AS killed
FROM core_data_view_gaps"""
SELECT_CRASHES = "SELECT process, since, until FROM core_data_view_gaps WHERE views IS NULL ORDER BY since, id"
UPSERT_MARKER = """
INSERT INTO core_data_view_writers (process, host, pid, started_at, flushed_through)
VALUES (%(process)s, %(host)s, %(pid)s, %(started_at)s, %(flushed_through)s)
ON CONFLICT (process) DO UPDATE SET flushed_through = excluded.flushed_through, heartbeat_at = now()"""
DELETE_MARKER = "DELETE FROM core_data_view_writers WHERE process = %(process)s"
SELECT_MARKERS_HERE = "SELECT process, pid FROM core_data_view_writers WHERE host = %(host)s"
# Two starting processes may find the same marker: each row is deleted (and its gap written) once.
RECORD_GONE = """
WITH gone AS (
    DELETE FROM core_data_view_writers
    WHERE process = ANY(%(gone)s) OR heartbeat_at < now() - make_interval(secs => %(stale_s)s)
    RETURNING process, flushed_through)
INSERT INTO core_data_view_gaps (views, since, until, process, reason)
SELECT NULL, flushed_through, greatest(now(), flushed_through), process, %(reason)s FROM gone"""
GONE_REASON = (
    "an unknown number of views: the dashboard process was killed (no clean exit) with the views it had not written"
)
DELETE_OLD_GAPS = "DELETE FROM core_data_view_gaps WHERE until < now() - make_interval(days => %(days)s)"
COLUMNS = ["id", "viewed_at", "viewer", "role", "kind", "customer_id", "target", "purpose"]
# A customer's views: the rows naming them, and views of threads the subject resolver attributes to them (a thread
# viewed before it could be attributed, or of agents that tag no customer).
SELECT_VIEWS = """
SELECT id, viewed_at, viewer, role, kind, customer_id, target, purpose FROM core_data_views
WHERE %(customer)s::text IS NULL OR customer_id = %(customer)s OR (kind = 'thread' AND target = ANY(%(threads)s))
ORDER BY viewed_at DESC, id DESC LIMIT %(limit)s"""
# The same, oldest first and whole, with the access export's parameters (core.privacy.access: art. 15 lists them).
SELECT_FOR_EXPORT = """
SELECT id, viewed_at, viewer, role, kind, target, purpose FROM core_data_views
WHERE customer_id = %(cliente_id)s OR (kind = 'thread' AND target = ANY(%(threads)s))
ORDER BY viewed_at, id"""

CHAIN = "views"
LOCK_CHAIN = "SELECT pg_advisory_xact_lock(hashtext('core_register_chain'), hashtext(%(chain)s))"
# The retention cut: the longest run of the chain's oldest links whose rows are all older than the retention.
SELECT_CUT = """
WITH links AS (
    SELECT c.position, c.row_id, c.row_hash, v.viewed_at < now() - make_interval(days => %(days)s) AS old
    FROM core_register_chain c LEFT JOIN core_data_views v ON v.id = c.row_id
    WHERE c.chain = %(chain)s AND c.table_name = 'core_data_views')
SELECT l.position, l.row_hash FROM links l
WHERE l.old AND l.position < coalesce((SELECT min(position) FROM links WHERE NOT old OR old IS NULL), l.position + 1)
ORDER BY l.position DESC LIMIT 1"""
DELETE_ROWS = """
DELETE FROM core_data_views v USING core_register_chain c
WHERE c.chain = %(chain)s AND c.table_name = 'core_data_views' AND c.row_id = v.id AND c.position <= %(position)s"""
DELETE_LINKS = "DELETE FROM core_register_chain WHERE chain = %(chain)s AND position <= %(position)s"
INSERT_CUT = """
INSERT INTO core_register_cuts (chain, position, row_hash, rows_deleted, retention_days)
VALUES (%(chain)s, %(position)s, %(row_hash)s, %(rows)s, %(days)s)"""


class DataViewLogError(RuntimeError):
    """Views could not be written (the database refused or did not answer within the timeouts)."""


@dataclass(frozen=True)
class View:
    """One look at a customer's data: who (`viewer`, `role`), what (`kind`, `target`: a namespace prefix, a thread
    id, a request), whose (`customer_id`, None when not a customer's), why (`purpose`, when required), when
    (`viewed_at`: set when it is recorded; written as is however late the database takes it)."""

    viewer: str
    role: str
    kind: str
    target: str
    customer_id: str | None = None
    purpose: str | None = None
    viewed_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown view kind {self.kind!r}; known: {', '.join(KINDS)}")
        for name in ("viewer", "role", "target", "customer_id", "purpose"):
            value = getattr(self, name)
            if value is None and name in ("customer_id", "purpose"):
                continue
            if not isinstance(value, str) or not value.strip() or "\x00" in value or len(value) > MAX_TEXT:
                raise ValueError(f"view {name} must be non-empty text without NUL, at most {MAX_TEXT} characters")
        if not isinstance(self.viewed_at, datetime) or self.viewed_at.tzinfo is None:
            raise ValueError("view viewed_at must be a datetime with a time zone")


def customer_of(prefix: str) -> str | None:
    """The customer a namespace belongs to (`clientes.C9` and nested `clientes.C9.x` -> C9), else None."""
    parts = prefix.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == CUSTOMER_ROOT and parts[1] else None


@dataclass(frozen=True)
class Gap:
    """Views not recorded: how many, viewed between `since` and `until`, and why."""

    views: int
    since: datetime
    until: datetime
    reason: str


HOST = socket.gethostname()
PROCESS = f"{HOST}:{os.getpid()}"


def _alive(pid: int) -> bool:
    """Whether a process `pid` runs on this host (another than this one: a marker with this pid is a previous
    process's, as after a container restart)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_marker(db: Database, started_at: datetime) -> None:
    """Record the processes that are gone with their views (see the module's docstring) and write this process's
    marker, in one transaction under the writer's timeouts. Raises DataViewLogError when the database refuses."""
    try:
        with db.ours.connection() as conn, conn.transaction():  # the log lives in our database (issue 52)
            conn.execute(LOG_TIMEOUTS)
            here = conn.execute(SELECT_MARKERS_HERE, {"host": HOST}).fetchall()
            gone = [m["process"] for m in here if not _alive(m["pid"])]
            conn.execute(RECORD_GONE, {"gone": gone, "stale_s": STALE_AFTER_S, "reason": GONE_REASON})
            conn.execute(UPSERT_MARKER, _marker(started_at, started_at))
    except (psycopg.Error, DatabaseUnavailable) as exc:
        raise DataViewLogError(f"marker not written: {exc}") from exc


def _marker(started_at: datetime, flushed_through: datetime) -> dict:
    return {
        "process": PROCESS,
        "host": HOST,
        "pid": os.getpid(),
        "started_at": started_at,
        "flushed_through": flushed_through,
    }


def log_views(
    db: Database,
    views: Iterable[View],
    gap: Gap | None = None,
    marker: tuple[datetime, datetime] | None = None,
) -> int:
    """Write `views` in one INSERT (each row sealed in the 'views' chain by its trigger), `gap` (views this
    process could not record) and this process's `marker` (started at, flushed through) in the same transaction;
    returns how many views. Raises DataViewLogError when the database does not take them within the timeouts
    (nothing is written). What the background writer runs."""
    batch = list(views)
    if not batch and gap is None and marker is None:
        return 0
    params = {
        "at": [v.viewed_at for v in batch],
        "viewer": [v.viewer for v in batch],
        "role": [v.role for v in batch],
        "kind": [v.kind for v in batch],
        "customer": [v.customer_id for v in batch],
        "target": [v.target for v in batch],
        "purpose": [v.purpose for v in batch],
    }
    try:
        with db.ours.connection() as conn, conn.transaction():
            conn.execute(LOG_TIMEOUTS)
            if batch:
                conn.execute(INSERT_VIEWS, params)
            if gap is not None:
                conn.execute(
                    INSERT_GAP,
                    {
                        "views": gap.views,
                        "since": gap.since,
                        "until": gap.until,
                        "process": PROCESS,
                        "reason": gap.reason,
                    },
                )
            if marker is not None:
                conn.execute(UPSERT_MARKER, _marker(*marker))
    except (psycopg.Error, DatabaseUnavailable) as exc:
        raise DataViewLogError(f"{len(batch)} view(s) not written: {exc}") from exc
    return len(batch)


class ViewQueue:
    """This process's views of one database waiting to be written (at most `capacity`), and the thread that writes
    them: every `every_s` (or as soon as `rows` wait), one INSERT of up to `rows`, the oldest first; a failed write
    keeps them and is retried after `retry_s`. Views that do not fit are lost: counted at once, recorded as a gap
    with the next write that succeeds. Its marker is written when it starts (see the module's docstring), with
    each write, and every `heartbeat_s` when idle."""

    def __init__(
        self,
        db: Database,
        *,
        capacity: int = QUEUE_CAPACITY,
        every_s: float = FLUSH_EVERY_S,
        rows: int = FLUSH_ROWS,
        retry_s: float = RETRY_EVERY_S,
        heartbeat_s: float = HEARTBEAT_S,
        first_view: datetime | None = None,
    ):
        if capacity < 1 or rows < 1 or every_s <= 0 or retry_s <= 0 or heartbeat_s <= 0:
            raise ValueError("capacity and rows must be >= 1, every_s, retry_s and heartbeat_s > 0")
        self.db, self.capacity, self.every_s, self.rows, self.retry_s = db, capacity, every_s, rows, retry_s
        self.heartbeat_s = heartbeat_s
        now = datetime.now(UTC)
        self.started_at = min(now, first_view or now)  # the view it starts for was viewed just before
        self._marked = self._mark()
        self._cond = threading.Condition()
        self._waiting: deque[View] = deque()
        self._lost: Gap | None = None  # lost, not yet recorded in the database
        self._failing: tuple[datetime, str] | None = None  # since when writes fail, and the last error
        self._flushing = False
        self.closed = False
        self._thread = threading.Thread(target=self._run, name="data-views-writer", daemon=True)
        self._thread.start()

    def put(self, views: Iterable[View]) -> int:
        """Queue `views` (never waits on the database); returns how many did not fit (lost, counted)."""
        batch = list(views)
        with self._cond:
            room = 0 if self.closed else max(0, self.capacity - len(self._waiting))
            self._waiting.extend(batch[:room])
            if batch[room:]:
                self._lose(batch[room:], "the dashboard's queue of views was full: the database did not take them")
            self._cond.notify_all()
        return len(batch[room:])

    def _mark(self) -> bool:
        """Write the start marker (recording the processes that are gone); False when the database refused it (the
        writer tries again before its next write)."""
        try:
            start_marker(self.db, self.started_at)
        except DataViewLogError as exc:
            log.warning("data views: this process's marker is not written yet: %s", exc)
            return False
        return True

    def _lose(self, views: list[View], reason: str) -> None:
        """Count views that will not be written (caller holds the lock)."""
        times = [v.viewed_at for v in views]
        lost = self._lost
        self._lost = Gap(
            len(views) + (lost.views if lost else 0),
            min(times + ([lost.since] if lost else [])),
            max(times + ([lost.until] if lost else [])),
            reason,
        )
        LOG_FAILURES.inc(len(views))
        log.error("data views: %d view(s) of customer data not recorded (%s)", len(views), reason)

    def _run(self) -> None:
        while True:
            with self._cond:
                beat = False
                while not beat and not self.closed and not self._waiting and self._lost is None:
                    beat = not self._cond.wait(self.heartbeat_s)
                deadline = time.monotonic() + self.every_s  # let the views of the next moments share the INSERT
                while (
                    not self.closed
                    and not self._flushing
                    and len(self._waiting) < self.rows
                    and (left := deadline - time.monotonic()) > 0
                ):
                    self._cond.wait(left)
                if not beat and not self._waiting and self._lost is None:
                    if self.closed:
                        return
                    continue
                batch, gap = list(itertools.islice(self._waiting, self.rows)), self._lost
                # every view viewed before this is in the batch or written: the next waiting one, or now (a view
                # made just before this and queued just after moves the marker back with the next write)
                through = self._waiting[len(batch)].viewed_at if len(self._waiting) > len(batch) else datetime.now(UTC)
            try:
                if not self._marked:
                    self._marked = self._mark()
                log_views(self.db, batch, gap, (self.started_at, through))
            except Exception as exc:  # noqa: BLE001 - whatever it was, the views wait and the thread goes on
                with self._cond:
                    if self._failing is None:
                        log.warning(
                            "data views: %d view(s) waiting, the database does not take them: %s",
                            len(self._waiting),
                            exc,
                        )
                    self._failing = (self._failing[0] if self._failing else datetime.now(UTC), str(exc).splitlines()[0])
                    if self.closed:
                        return
                    self._cond.wait(self.retry_s)
                continue
            with self._cond:
                for _ in range(min(len(batch), len(self._waiting))):  # close() may have given them up meanwhile
                    self._waiting.popleft()
                if gap is not None:
                    now_lost = self._lost
                    # views lost while the gap was being written stay counted (from the gap's end: never later)
                    self._lost = (
                        None
                        if now_lost is gap or now_lost is None  # (only this thread empties it)
                        else Gap(now_lost.views - gap.views, gap.until, now_lost.until, now_lost.reason)
                    )
                self._failing = None
                self._cond.notify_all()

    def flush(self, timeout_s: float) -> bool:
        """Write what is waiting now, without the batching delay; True when nothing waits (within `timeout_s`)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._flushing = True
            self._cond.notify_all()
            try:
                while (self._waiting or self._lost is not None) and (left := deadline - time.monotonic()) > 0:
                    self._cond.wait(left)
                return not self._waiting and self._lost is None
            finally:
                self._flushing = False

    def close(self, wait_s: float = EXIT_WAIT_S) -> None:
        """At exit: write what waits (for up to `wait_s`), then count what is left as lost and say so. Once: the exit
        hook of a queue closed before (data_views.close_all) does nothing."""
        if self.closed:
            return
        self.flush(wait_s)
        with self._cond:
            self.closed = True
            if self._waiting:
                self._lose(list(self._waiting), "the dashboard process exited before the database took them")
                self._waiting.clear()
            if self._lost is not None:
                log.error(
                    "data views: %d view(s) of customer data viewed %s..%s were not recorded and the database "
                    "cannot be told (%s)",
                    self._lost.views,
                    self._lost.since.isoformat(),
                    self._lost.until.isoformat(),
                    self._lost.reason,
                )
            self._cond.notify_all()
            lost = self._lost is not None
        self._thread.join(1.0)
        if lost or self._thread.is_alive():
            return  # the marker stays: the next start records the gap (the writer might write the marker again)
        try:
            with self.db.ours.connection() as conn, conn.transaction():
                conn.execute(LOG_TIMEOUTS)
                conn.execute(DELETE_MARKER, {"process": PROCESS})
        except (psycopg.Error, DatabaseUnavailable) as exc:
            log.error("data views: this process's marker stays (the next start will report a gap): %s", exc)

    def state(self) -> tuple[int, datetime | None, Gap | None, tuple[datetime, str] | None]:
        """(views waiting, the oldest one's time, lost not yet recorded, (failing since, last error))."""
        with self._cond:
            return (
                len(self._waiting),
                self._waiting[0].viewed_at if self._waiting else None,
                self._lost,
                self._failing,
            )


_queues: dict[str, ViewQueue] = {}
_queues_lock = threading.Lock()


def queue_for(db: Database, **options) -> ViewQueue:
    """This process's queue for `db` (by its DSN), started on first use (with `options`, ViewQueue's) and flushed
    at exit."""
    with _queues_lock:
        queue = _queues.get(db.dsn)
        if queue is None or queue.closed:
            queue = _queues[db.dsn] = ViewQueue(db, **options)
            atexit.register(queue.close)
        return queue


def close_all() -> None:
    """Close every queue of this process now (what the exit hook does for each), e.g. before its server stops."""
    with _queues_lock:
        queues = list(_queues.values())
    for queue in queues:
        queue.close()


def record(db: Database, views: Iterable[View]) -> int:
    """Log `views` without waiting for the database (what pages call); returns how many could not be queued (lost:
    counted, and recorded as not recorded with the next write)."""
    batch = list(views)
    return queue_for(db, first_view=min((v.viewed_at for v in batch), default=None)).put(batch)


def flush(db: Database, timeout_s: float = EXIT_WAIT_S) -> bool:
    """Write this process's waiting views of `db` now; True when none is left waiting within `timeout_s`."""
    with _queues_lock:
        queue = _queues.get(db.dsn)
    return True if queue is None else queue.flush(timeout_s)


@dataclass(frozen=True)
class Crash:
    """An unknown number of views lost by `process` (host:pid), killed after `since` (its last write) and found
    gone at `until`."""

    process: str
    since: datetime
    until: datetime


@dataclass(frozen=True)
class Unrecorded:
    """Views of customer data not in the log: `views` were lost since `since` (gaps recorded by every dashboard,
    plus this process's not recorded yet); `waiting` wait in this process's queue since `waiting_since` because
    the database has not taken them (`error`); `crashes`: processes killed with views not written."""

    views: int = 0
    since: datetime | None = None
    waiting: int = 0
    waiting_since: datetime | None = None
    error: str | None = None
    crashes: tuple[Crash, ...] = ()


def unrecorded(db: Database) -> Unrecorded:
    """What the DPO must know is missing from the log (see Unrecorded)."""
    row = one(db.ours.fetch_one(SELECT_GAPS))
    with _queues_lock:
        queue = _queues.get(db.dsn)
    waiting, oldest, lost, failing = queue.state() if queue is not None else (0, None, None, None)
    since = [t for t in (row["since"], lost.since if lost else None) if t is not None]
    return Unrecorded(
        int(row["views"]) + (lost.views if lost else 0),
        min(since) if since else None,
        waiting,
        oldest,
        failing[1] if failing else None,
        tuple(Crash(**c) for c in db.ours.fetch(SELECT_CRASHES)),
    )


def views(
    db: Database, customer_id: str | None = None, thread_ids: Iterable[str] = (), limit: int = 1000
) -> pd.DataFrame:
    """The latest views (newest first), all or of one customer (theirs, and of `thread_ids`: their threads)."""
    rows = db.ours.fetch(SELECT_VIEWS, {"customer": customer_id, "threads": list(thread_ids), "limit": limit})
    return pd.DataFrame(rows, columns=COLUMNS)


def customer_views(db: Database, customer_id: str, limit: int = 1000) -> pd.DataFrame:
    """One customer's views, their threads found by the subject resolver (core.privacy.subjects)."""
    from core.privacy import subjects

    return views(db, customer_id, subjects.resolve(db, customer_id).thread_ids, limit)


def sweep_step(db: Database, retention_days: int) -> int:
    """Delete the views older than `retention_days` (the chain's oldest links, with their rows) and record the cut,
    in one transaction under the chain's seal lock; returns how many rows went."""
    params: dict[str, Any] = {"chain": CHAIN, "days": int(retention_days)}
    with db.ours.connection() as conn, conn.transaction():
        conn.execute(DELETE_OLD_GAPS, params)  # what was not recorded, as long as what was
        conn.execute(LOCK_CHAIN, params)
        cut = conn.execute(SELECT_CUT, params).fetchone()
        if cut is None:
            return 0
        params |= {"position": cut["position"], "row_hash": cut["row_hash"]}
        params["rows"] = conn.execute(DELETE_ROWS, params).rowcount
        conn.execute(DELETE_LINKS, params)
        conn.execute(INSERT_CUT, params)
    log.info(
        "data views: %d view(s) older than %d days deleted (chain cut at link %d)",
        params["rows"],
        retention_days,
        cut["position"],
    )
    return params["rows"]


__all__ = [
    "Crash",
    "DataViewLogError",
    "Gap",
    "KINDS",
    "LOG_FAILURES",
    "Unrecorded",
    "View",
    "ViewQueue",
    "customer_of",
    "customer_views",
    "flush",
    "log_views",
    "queue_for",
    "record",
    "start_marker",
    "sweep_step",
    "unrecorded",
    "views",
]
