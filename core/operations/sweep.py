"""The sweep job: the store's TTL sweep and checkpoint retention, one run at a time.

`python -m core.operations.sweep_cli` is the CronJob entry (see README, "Sweeps and retention"). A run:

1. takes a PostgreSQL advisory lock (`pg_try_advisory_lock`) on its own connection; if another
   run holds it, it logs a 'locked' row, reports "already running" and exits 0;
2. TTL sweep: in one REPEATABLE READ transaction, locks the expired `store` rows, counts them per
   namespace root with their `store_vectors` rows, then calls the store's own `sweep_ttl()`
   (same snapshot, same `now()`: the counts are exact, and a mismatch rolls everything back);
3. checkpoint retention: threads whose newest checkpoint (`checkpoint->>'ts'`, not `core_conversations`: see the
   README) is older than `retention_days` are deleted with the checkpointer's `delete_thread` (a dry run lists them);
   then extracts new tool calls and token usage (core.history.tool_calls) and, with a policy, prunes the history
   of live threads (core.storage.prune, which never deletes a checkpoint the extraction has not read); then
   refreshes the per-thread storage summary and the attribution coverage, indexes the threads written since the
   last run for the residue scan (core.privacy.token_index) and recomputes which store each customer belongs to
   (core.memory.customer_stores, the store managers' scope);
4. calls the erasure register's re-check (`core.privacy.erasure_register.recheck_all(db)`), then (not in a dry run)
   settles physically the complete requests not settled yet (`core.privacy.physical.settle(db)`: plain VACUUM of the
   agents' tables, CHECKPOINT, a read of the server's files when they are readable, recorded in
   `core_erasure_physical`);
5. completes its row in `core_sweep_log` (the first documents' keys in `core_sweep_documents`).

A row still 'running' while no process holds the lock has no process behind it (a pod killed, a dashboard restarted
mid-run): the next run, once it holds the lock, and the Sweeps page close it as 'stopped' with the reason
(`close_dead_runs`). The dashboard runs a sweep in a thread of its own (`start_sweep`): it goes on to its end whatever
the browser that started it does.

The read side of the Sweeps page (DataFrames) is core/operations/sweep_reads.py; the CLI is sweep_cli.py.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pandas as pd
import psycopg
from psycopg.rows import DictRow, dict_row

from agent_memory_runtime import clock
from core.capture.recount import recount_without_slot
from core.config import DEFAULT_DIMS, load_settings
from core.db import CONNECT_TIMEOUT_S, Database, DatabaseUnavailable, one
from core.history import tool_calls
from core.memory import customer_stores
from core.memory.store import build_store
from core.privacy import data_views, subjects, token_index
from core.privacy import ours as ours_db
from core.storage import prune as history
from core.storage.storage import refresh_thread_storage

log = logging.getLogger(__name__)

# Arbitrary constant shared by every sweeping process ("coreswep").
SWEEP_LOCK_ID = 0x636F7265_73776570
TRIGGERS = ("scheduled", "manual", "demo")
DEFAULT_RETENTION_DAYS = 90
RETENTION_ENV = "SWEEP_RETENTION_DAYS"
RETENTION_BATCH = 500  # threads re-checked and deleted per batch
THREADS_SAMPLE = DOCUMENTS_SAMPLE = 1000  # thread ids kept in the log row, document keys in core_sweep_documents
SERIALIZATION_RETRIES = 3

# --- job SQL ----------------------------------------------------------------------------------

TRY_LOCK = "SELECT pg_try_advisory_lock(%s) AS locked"
UNLOCK = "SELECT pg_advisory_unlock(%s)"

# Runs still 'running' while no other session holds the sweep lock (a bigint advisory key is classid: its high 32 bits,
# objid: its low 32 bits, objsubid 1): their process is gone, since a run finishes its row before it unlocks.
CLOSE_DEAD_RUNS = """
UPDATE core_sweep_log SET status = 'stopped', finished_at = now(), error = %(reason)s
WHERE status = 'running' AND NOT EXISTS (
    SELECT 1 FROM pg_locks
    WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND classid = (%(key)s >> 32)::oid AND objid = (%(key)s & 4294967295)::oid AND objsubid = 1)
RETURNING id"""
DEAD_RUN_REASON = "its process ended before the run did (no process held the sweep lock); closed by {by}"

INSERT_RUN = """
INSERT INTO core_sweep_log (trigger, operator, host, status, dry_run, retention_days, started_at)
VALUES (%s, %s, %s, %s, %s, %s, now() + %s::interval) RETURNING id, started_at"""

INSERT_LOCKED_RUN = """
INSERT INTO core_sweep_log (trigger, operator, host, status, dry_run, retention_days, started_at, finished_at, error)
VALUES (%s, %s, %s, 'locked', %s, %s, now() + %s::interval, now() + %s::interval,
        'another sweep holds the advisory lock (already running)')
RETURNING id, started_at"""

FINISH_RUN = """
UPDATE core_sweep_log
SET finished_at = now() + %(shift)s::interval, status = %(status)s, documents_deleted = %(documents)s,
vectors_deleted = %(vectors)s,
    deleted_by_root = %(by_root)s, threads_found = %(threads_found)s, threads_deleted = %(threads_deleted)s,
    threads_sample = %(threads_sample)s, erasure_recheck = %(erasure)s, error = %(error)s,
    tool_calls_extracted = %(tool_calls)s, threads_tokenized = %(tokenized)s, data_views_deleted = %(views)s
WHERE id = %(id)s RETURNING finished_at"""

# Locks the expired rows so nothing refreshes or rewrites them before sweep_ttl() deletes them;
# under REPEATABLE READ the DELETE then sees exactly these rows.
COUNT_EXPIRED_LOCKED = """
WITH expired AS MATERIALIZED (
    SELECT prefix, key FROM store
    WHERE expires_at IS NOT NULL AND expires_at < now()
    FOR UPDATE
)
SELECT split_part(e.prefix, '.', 1) AS root, count(*) AS documents, coalesce(sum(v.n), 0) AS vectors
FROM expired e
CROSS JOIN LATERAL (SELECT count(*) AS n FROM store_vectors sv WHERE sv.prefix = e.prefix AND sv.key = e.key) v
GROUP BY 1 ORDER BY 1"""

COUNT_EXPIRED = """
SELECT split_part(s.prefix, '.', 1) AS root, count(*) AS documents, coalesce(sum(v.n), 0) AS vectors
FROM store s
CROSS JOIN LATERAL (SELECT count(*) AS n FROM store_vectors sv WHERE sv.prefix = s.prefix AND sv.key = s.key) v
WHERE s.expires_at IS NOT NULL AND s.expires_at < now()
GROUP BY 1 ORDER BY 1"""

# The first expired documents (in a real run: inside the sweep's transaction, the rows it locks and deletes).
SELECT_EXPIRED_KEYS = """
SELECT prefix, key FROM store WHERE expires_at IS NOT NULL AND expires_at < now() ORDER BY prefix, key LIMIT %s"""
INSERT_DOCUMENTS = (
    "INSERT INTO core_sweep_documents (run_id, prefix, key) SELECT %s, * FROM unnest(%s::text[], %s::text[])"
)

# A thread's age is the `ts` of its newest checkpoint (any checkpoint_ns), written by the checkpointer.
SELECT_OLD_THREADS = """
SELECT thread_id, max((checkpoint->>'ts')::timestamptz) AS last_checkpoint_at
FROM checkpoints
GROUP BY thread_id
HAVING max((checkpoint->>'ts')::timestamptz) < now() - make_interval(days => %s)
ORDER BY last_checkpoint_at, thread_id"""

# Re-checked just before deleting a batch: a thread that resumed since the listing is kept.
RECHECK_OLD_THREADS = """
SELECT thread_id FROM checkpoints
WHERE thread_id = ANY(%s)
GROUP BY thread_id
HAVING max((checkpoint->>'ts')::timestamptz) < now() - make_interval(days => %s)"""


class SweepInputError(ValueError):
    """A sweep was asked with an invalid argument; nothing was changed or logged."""


StepCallback = Callable[[str, float, str], None]


@dataclass
class SweepResult:
    """What one run did. In a dry run the counts are what a real run would delete now."""

    run_id: int | None
    status: str  # ok / dry_run / locked / error
    trigger: str
    dry_run: bool
    retention_days: int
    host: str
    started_at: datetime | None = None
    finished_at: datetime | None = None
    documents_deleted: int = 0
    vectors_deleted: int = 0
    deleted_by_root: dict[str, int] = field(default_factory=dict)
    documents: list[tuple[str, str]] = field(default_factory=list)  # (prefix, key) of the first DOCUMENTS_SAMPLE
    threads: list[str] = field(default_factory=list)  # old threads found (deleted unless dry run)
    threads_deleted: int = 0
    erasure_recheck: str | None = None
    physical_erasure: str | None = None  # core.privacy.physical.settle's summary (None: step not run)
    tool_calls_extracted: int | None = None  # tool calls newly extracted from checkpoints (None: step not run)
    threads_tokenized: int | None = None  # threads (re)indexed for the residue scan (None: step not run)
    threads_not_readable: int = 0  # threads of the index with encrypted rows no configured key opens
    data_views_deleted: int | None = None  # views of customer data past their retention (None: step not run)
    prune: history.PruneResult | None = None  # history pruning (None: no policy given, or the step failed)
    error: str | None = None

    @property
    def locked(self) -> bool:
        return self.status == "locked"

    def summary(self) -> str:
        if self.locked:
            return f"sweep already running elsewhere (run {self.run_id} logged as 'locked'); nothing done"
        verb = "would delete" if self.dry_run else "deleted"
        roots = ", ".join(f"{r} {n}" for r, n in sorted(self.deleted_by_root.items())) or "none"
        text = (
            f"sweep run {self.run_id} [{self.status}] {verb} {self.documents_deleted} documents "
            f"({roots}) and {self.vectors_deleted} vectors; retention ({self.retention_days} days) "
            f"{verb} {len(self.threads) if self.dry_run else self.threads_deleted} threads"
        )
        if self.prune is not None:
            text += f"; {self.prune.summary()}"
        if self.tool_calls_extracted is not None:
            text += f"; {self.tool_calls_extracted} tool calls extracted from checkpoints"
        if self.threads_tokenized is not None:
            text += f"; {self.threads_tokenized} threads indexed for the residue scan"
            if self.threads_not_readable:  # no configured key opens them: the residue scan names them not scanned
                text += f" ({self.threads_not_readable} threads with encrypted rows not readable)"
        if self.data_views_deleted:
            text += f"; {self.data_views_deleted} views of customer data past their retention deleted"
        if self.erasure_recheck:
            text += f"; erasure register: {self.erasure_recheck}"
        if self.physical_erasure:
            text += f"; {self.physical_erasure}"
        return text + (f"; error: {self.error}" if self.error else "")


def validate_retention_days(value: Any) -> int:
    """`value` as a whole number of days >= 1; raises SweepInputError otherwise."""
    if isinstance(value, bool):
        raise SweepInputError(f"retention days must be a whole number >= 1, got {value!r}")
    try:
        days = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise SweepInputError(f"retention days must be a whole number >= 1, got {value!r}") from None
    if days < 1:
        raise SweepInputError(
            f"retention days must be >= 1 (threads older than that many days are deleted), got {days}"
        )
    return days


def default_retention_days() -> int:
    """`SWEEP_RETENTION_DAYS` from the environment, else DEFAULT_RETENTION_DAYS."""
    raw = os.environ.get(RETENTION_ENV)
    return DEFAULT_RETENTION_DAYS if raw in (None, "") else validate_retention_days(raw)


def _connect(dsn: str) -> psycopg.Connection[DictRow]:
    try:
        return psycopg.connect(dsn, autocommit=True, row_factory=dict_row, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(f"sweep cannot reach PostgreSQL: {exc}") from exc


# A sweep deleting more than this share of `store` vacuums it at once: until then the dead rows
# disable the index-only scans the pages count expiries with (the forecast went from 0.19 s to
# 1.1 s after a 195k-row sweep at 1M rows, BENCHMARKS.md). Without the table's ownership (or the
# MAINTAIN privilege) PostgreSQL only warns and autovacuum does it later.
VACUUM_AFTER_SHARE = 0.01
SELECT_STORE_ROWS = "SELECT greatest(reltuples, 1) AS n FROM pg_class WHERE oid = 'store'::regclass"


def _sweep_ttl(
    conn: psycopg.Connection[DictRow], dry_run: bool
) -> tuple[int, int, dict[str, int], list[tuple[str, str]]]:
    """TTL sweep on `conn`; returns (documents, vectors, documents per root, the first documents' keys)."""
    if dry_run:
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")  # counts and keys agree
            rows = conn.execute(COUNT_EXPIRED).fetchall()
            keys = [(r["prefix"], r["key"]) for r in conn.execute(SELECT_EXPIRED_KEYS, (DOCUMENTS_SAMPLE,))]
        return (
            sum(r["documents"] for r in rows),
            sum(int(r["vectors"]) for r in rows),
            {r["root"]: r["documents"] for r in rows},
            keys,
        )
    from core.memory.embeddings import OfflineHashEmbeddings
    from core.migrate import stored_dims

    dims = stored_dims(conn) or DEFAULT_DIMS
    # sweep_ttl() never embeds: the offline embedder only satisfies the index configuration.
    store = build_store(conn, embeddings=OfflineHashEmbeddings(dims), dims=dims)
    for attempt in range(1, SERIALIZATION_RETRIES + 1):
        try:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                rows = conn.execute(COUNT_EXPIRED_LOCKED).fetchall()
                by_root = {r["root"]: r["documents"] for r in rows}
                documents = sum(by_root.values())
                vectors = sum(int(r["vectors"]) for r in rows)
                keys = [(r["prefix"], r["key"]) for r in conn.execute(SELECT_EXPIRED_KEYS, (DOCUMENTS_SAMPLE,))]
                deleted = store.sweep_ttl()
                if deleted != documents:  # cannot happen under this lock; never commit wrong counts
                    raise RuntimeError(f"sweep_ttl() deleted {deleted} rows but {documents} were counted; rolled back")
            if documents > VACUUM_AFTER_SHARE * one(conn.execute(SELECT_STORE_ROWS).fetchone())["n"]:
                conn.execute("VACUUM (ANALYZE) store")
            return documents, vectors, by_root, keys
        except psycopg.errors.SerializationFailure:
            if attempt == SERIALIZATION_RETRIES:
                raise
            log.info("sweep: expired rows changed under the sweep, retrying (%d)", attempt)
    raise AssertionError("unreachable")


def find_old_threads(db: Database, retention_days: int) -> pd.DataFrame:
    """Threads whose newest checkpoint is older than `retention_days` (thread_id, last_checkpoint_at)."""
    days = validate_retention_days(retention_days)
    rows = db.fetch(SELECT_OLD_THREADS, (days,), read_only=False)
    return pd.DataFrame(rows, columns=["thread_id", "last_checkpoint_at"])


def _retention(
    db: Database, conn: psycopg.Connection[DictRow], days: int, dry_run: bool, step: StepCallback
) -> tuple[list[str], int]:
    """Checkpoint retention; returns (old threads found, threads deleted)."""
    from langgraph.checkpoint.postgres import PostgresSaver

    threads = [r["thread_id"] for r in conn.execute(SELECT_OLD_THREADS, (days,)).fetchall()]
    if dry_run or not threads:
        return threads, 0
    saver = PostgresSaver(db.pool)
    deleted = 0
    for start in range(0, len(threads), RETENTION_BATCH):
        batch = threads[start : start + RETENTION_BATCH]
        still_old = [r["thread_id"] for r in conn.execute(RECHECK_OLD_THREADS, (batch, days)).fetchall()]
        for thread_id in still_old:
            saver.delete_thread(thread_id)
        deleted += len(still_old)
        step("retention", 0.5 + 0.4 * (start + len(batch)) / len(threads), f"{deleted}/{len(threads)}")
    return threads, deleted


def recheck_trigger(trigger: str, dry_run: bool) -> str:
    """What the erasure register records as the trigger of a re-check this run makes: `sweep` for a scheduled run
    (the periodic sweep, as every sweep was recorded before), else `sweep_<trigger>`; `_dry_run` appended for a dry
    run (issue 54 #4: a manual sweep or a dry run is not the periodic sweep). Named in both languages by the
    Erasure register page (erasure_trigger_<value>)."""
    name = "sweep" if trigger == "scheduled" else f"sweep_{trigger}"
    return f"sweep_{trigger}_dry_run" if dry_run else name


# Every re-check trigger a sweep records (recheck_trigger), for the pages that name them.
RECHECK_TRIGGERS = tuple(recheck_trigger(t, dry) for t in TRIGGERS for dry in (False, True))


def recheck_erasures(db: Database, trigger: str = "sweep") -> str:
    """The erasure register's re-check (`core.privacy.erasure_register.recheck_all(db)`) as its summary text,
    recorded with `trigger` (recheck_trigger)."""
    from core.privacy import erasure_register  # imported when used: the register's module is the larger one

    return str(erasure_register.recheck_all(db, trigger=trigger))


def settle_physical(db: Database) -> str:
    """The physical erasure step (`core.privacy.physical.settle(db)`) as its summary text (request numbers only)."""
    from core.privacy import physical

    return str(physical.settle(db))


def _close_dead_runs(conn: psycopg.Connection[DictRow], by: str) -> list[int]:
    rows = conn.execute(CLOSE_DEAD_RUNS, {"reason": DEAD_RUN_REASON.format(by=by), "key": SWEEP_LOCK_ID}).fetchall()
    closed = [r["id"] for r in rows]
    if closed:
        log.warning("sweep: runs %s had no process left: closed as stopped (%s)", closed, by)
    return closed


def close_dead_runs(db: Database) -> list[int]:
    """Close as 'stopped' (with the reason) every run still 'running' whose process is gone; returns their ids.
    The Sweeps page calls it; a run calls it once it holds the lock. The log and the lock are in our database."""
    with db.ours.connection() as conn:
        return _close_dead_runs(conn, "the Sweeps page")


def _no_step(stage: str, fraction: float, detail: str) -> None:
    pass


def run_sweep(
    db: Database,
    *,
    trigger: str = "scheduled",
    retention_days: int | None = None,
    dry_run: bool = False,
    operator: str | None = None,
    prune: history.PrunePolicy | None = None,
    on_step: StepCallback | None = None,
) -> SweepResult:
    """One sweep run (TTL sweep, checkpoint retention, history pruning by `prune` if given, erasure re-check),
    logged in `core_sweep_log` (the pruned threads in `core_prune_threads`).

    Returns the result; status 'locked' when another run holds the lock (nothing done), 'error'
    when a step failed (the error is in the result and the log; a failed TTL sweep deletes nothing).
    Raises SweepInputError for a bad trigger or retention days (nothing changed, nothing logged),
    DatabaseUnavailable if PostgreSQL cannot be reached. `on_step(stage, fraction 0..1, detail)` is
    called as the run progresses (stages: locked, ttl, retention, toolcalls, prune, storage, tokens, stores, erasure,
    physical, done).
    """
    if trigger not in TRIGGERS:
        raise SweepInputError(f"trigger must be one of {', '.join(TRIGGERS)}, got {trigger!r}")
    days = default_retention_days() if retention_days is None else validate_retention_days(retention_days)
    step = on_step or _no_step
    host = socket.gethostname()
    shift = clock.shift()  # zero, except in the demo replaying a past day (agent_memory_runtime.clock)
    result = SweepResult(None, "running", trigger, dry_run, days, host)
    # The lock and the log are in our database (issue 52: `mine`, the same connection where ours is the agents'); the
    # agents' deletes commit on `conn` in their own transactions, then the run's rows are written in ours: a crash
    # between leaves the run 'running', closed as 'stopped' by the next run (its counts were not recorded).
    with _connect(db.dsn) as conn, ours_db.connect(conn) as mine:
        if not one(mine.execute(TRY_LOCK, (SWEEP_LOCK_ID,)).fetchone())["locked"]:
            row = one(
                mine.execute(INSERT_LOCKED_RUN, (trigger, operator, host, dry_run, days, shift, shift)).fetchone()
            )
            result.run_id, result.started_at, result.status = row["id"], row["started_at"], "locked"
            result.finished_at, result.error = row["started_at"], "already running"
            log.warning("sweep: another run holds the advisory lock: already running, nothing done")
            step("done", 1.0, "locked")
            return result
        try:
            _close_dead_runs(mine, f"the next run, on {host}")
            row = one(mine.execute(INSERT_RUN, (trigger, operator, host, "running", dry_run, days, shift)).fetchone())
            result.run_id, result.started_at = row["id"], row["started_at"]
            step("locked", 0.05, f"run {result.run_id}")
            errors: list[str] = []
            try:
                step("ttl", 0.1, "")
                (result.documents_deleted, result.vectors_deleted, result.deleted_by_root, result.documents) = (
                    _sweep_ttl(conn, dry_run)
                )
                if result.documents:
                    mine.execute(INSERT_DOCUMENTS, (result.run_id, *map(list, zip(*result.documents, strict=True))))
                step("ttl", 0.5, f"{result.documents_deleted}")
            except Exception as exc:  # logged in the run's row; retention still runs
                log.exception("sweep: TTL sweep failed")
                errors.append(f"ttl sweep: {exc}")
            try:
                result.threads, result.threads_deleted = _retention(db, conn, days, dry_run, step)
                step("retention", 0.9, f"{result.threads_deleted}")
            except Exception as exc:
                log.exception("sweep: checkpoint retention failed")
                errors.append(f"retention: {exc}")
            if not dry_run:
                try:  # where no slot follows the database (logical decoding not allowed): the follower's aggregates
                    # recounted from the tables, after the deletions above (core.capture.recount)
                    recounted = recount_without_slot(db.dsn)
                    if recounted.done:
                        step("recount", 0.9, f"{recounted.seconds:.1f}")
                except Exception as exc:
                    log.exception("sweep: recount of the aggregates failed")
                    errors.append(f"aggregates recount: {exc}")
                try:  # before pruning, which keeps what the extraction has not read; the Preferences page and the
                    # Tokens and cost view read the extracted tables, not the blobs
                    extracted = tool_calls.sweep_step(db)
                    result.tool_calls_extracted = extracted.calls
                    step("toolcalls", 0.9, f"{extracted.calls}")
                except Exception as exc:
                    log.exception("sweep: tool-call extraction failed")
                    errors.append(f"tool-call extraction: {exc}")
            if prune is not None:
                try:  # after the extraction; before the storage refresh, which then shows what is left
                    result.prune = history.sweep_step(conn, result.run_id, prune, dry_run, step)
                except Exception as exc:
                    log.exception("sweep: history pruning failed")
                    errors.append(f"prune: {exc}")
            if not dry_run:
                storage_refreshed = False
                try:  # the Checkpoints page's storage view reads this summary, not the three tables
                    threads = refresh_thread_storage(db, sweep_run=result.run_id)
                    storage_refreshed = True
                    step("storage", 0.92, f"{threads}")
                except Exception as exc:
                    log.exception("sweep: thread storage refresh failed")
                    errors.append(f"thread storage: {exc}")
                try:  # the Erasure and Checkpoints pages read the attribution coverage as of this sweep, computed
                    # from the summary just refreshed (the three checkpoint tables are read once per sweep)
                    subjects.refresh_coverage(db, storage_refreshed=storage_refreshed, sweep_run=result.run_id)
                except Exception as exc:
                    log.exception("sweep: attribution coverage failed")
                    errors.append(f"attribution coverage: {exc}")
                try:  # before the erasure re-check, whose residue scan reads this index
                    indexed = token_index.sweep_step(db)
                    result.threads_tokenized, result.threads_not_readable = indexed.threads, indexed.unread_threads
                    step("tokens", 0.94, f"{result.threads_tokenized}")
                except Exception as exc:
                    log.exception("sweep: token index failed")
                    errors.append(f"token index: {exc}")
                try:  # which store each customer belongs to: the store managers' pages (core.memory.customer_stores)
                    mapped = customer_stores.refresh(db, load_settings(), trigger="sweep")
                    step("stores", 0.945, f"{mapped.with_store}")
                    errors += [f"customer stores, source {k}: {v}" for k, v in mapped.errors.items()]
                except Exception as exc:
                    log.exception("sweep: customer stores failed")
                    errors.append(f"customer stores: {exc}")
                try:  # who looked at a customer's data: kept DATA_VIEWS_RETENTION_DAYS (core.privacy.data_views)
                    result.data_views_deleted = data_views.sweep_step(db, load_settings().data_views_retention_days)
                except Exception as exc:
                    log.exception("sweep: data views retention failed")
                    errors.append(f"data views retention: {exc}")
            try:
                result.erasure_recheck = recheck_erasures(db, recheck_trigger(trigger, dry_run))
                step("erasure", 0.95, result.erasure_recheck or "")
            except Exception as exc:
                log.exception("sweep: erasure re-check failed")
                errors.append(f"erasure re-check: {exc}")
            if not dry_run:
                try:  # after the re-check: VACUUM, CHECKPOINT and a read of the files for the complete requests not
                    # physically settled yet (core.privacy.physical); never from a page's request
                    result.physical_erasure = settle_physical(db)
                    step("physical", 0.97, result.physical_erasure)
                except Exception as exc:
                    log.exception("sweep: physical erasure step failed")
                    errors.append(f"physical erasure: {exc}")
            result.error = "; ".join(errors) or None
            result.status = "error" if errors else ("dry_run" if dry_run else "ok")
            result.finished_at = one(
                mine.execute(
                    FINISH_RUN,
                    {
                        "id": result.run_id,
                        "status": result.status,
                        "documents": result.documents_deleted,
                        "vectors": result.vectors_deleted,
                        "by_root": json.dumps(result.deleted_by_root),
                        "threads_found": len(result.threads),
                        "threads_deleted": result.threads_deleted,
                        "threads_sample": json.dumps(result.threads[:THREADS_SAMPLE]),
                        "erasure": result.erasure_recheck,
                        "error": result.error,
                        "tool_calls": result.tool_calls_extracted,
                        "tokenized": result.threads_tokenized,
                        "views": result.data_views_deleted,
                        "shift": shift,
                    },
                ).fetchone()
            )["finished_at"]
        finally:
            mine.execute(UNLOCK, (SWEEP_LOCK_ID,))
    log.info("sweep: %s", result.summary())
    step("done", 1.0, result.status)
    return result


@dataclass
class SweepJob:
    """A sweep run in a thread of its own (`start_sweep`): its steps so far, then its result or its exception."""

    steps: list[tuple[str, float, str]] = field(default_factory=list)  # (stage, fraction, detail), as on_step says
    done: threading.Event = field(default_factory=threading.Event)
    result: SweepResult | None = None
    error: BaseException | None = None

    def outcome(self) -> SweepResult:
        """The run's result once `done`; raises what the run raised."""
        if self.error is not None:
            raise self.error
        assert self.result is not None, "the run has not ended"
        return self.result


def start_sweep(db: Database, *, on_end: Callable[[], None] | None = None, **kwargs: Any) -> SweepJob:
    """`run_sweep(db, **kwargs)` in a daemon thread, tied to no page or session: a page that started it may be left,
    rerun or closed, the run goes on to its end (a process that exits mid-run leaves a row the next run or the page
    closes as 'stopped'); then `on_end()` (in that thread: e.g. dropping the cached reads the run changed). Bad
    arguments raise SweepInputError here, before anything starts."""
    if kwargs.get("trigger", "scheduled") not in TRIGGERS:
        raise SweepInputError(f"trigger must be one of {', '.join(TRIGGERS)}, got {kwargs['trigger']!r}")
    if kwargs.get("retention_days") is not None:
        validate_retention_days(kwargs["retention_days"])
    job = SweepJob()

    def record(stage: str, fraction: float, detail: str) -> None:
        job.steps.append((stage, fraction, detail))

    def run() -> None:
        try:
            job.result = run_sweep(db, on_step=record, **kwargs)
        except BaseException as exc:  # handed to whoever reads the outcome
            log.exception("sweep: the run failed")
            job.error = exc
        finally:
            try:
                if on_end is not None:
                    on_end()
            except Exception:
                log.exception("sweep: the run's on_end failed")
            job.done.set()

    threading.Thread(target=run, name="sweep-job", daemon=True).start()
    return job


if __name__ == "__main__":  # the command used to be this module: an old CronJob must fail, not do nothing
    sys.exit("the sweep's command is `python -m core.operations.sweep_cli` (this module is the job, not its CLI)")
