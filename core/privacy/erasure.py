"""Erasure of one customer: everything the agents' memory holds about them, with evidence.

What is deleted, in each pass, until a pass ends with every evidence query at zero:
1. the store: `store.search` over the prefix `("clientes", id)` (nested namespaces included, expired
   rows included) page by page until nothing is left, each page deleted with one
   `store.batch([PutOp(ns, key, None), ...])`; `store_vectors` rows go with them (ON DELETE CASCADE);
2. the customer's checkpoint threads (checkpoint metadata `cliente_id`, `core_conversations`, and
   threads an earlier request found), each with the checkpointer's `delete_thread`;
3. our own tables that name the customer: every `core_*` table with a `prefix`, `thread_id`,
   `subject_root`+`subject_id` or `cliente_id` column (the memory-write log, conversations, guard
   denials once that table exists, ...), except the erasure register itself.
Writes that arrive meanwhile (a live agent) are caught by the next pass; after MAX_PASSES the
request is recorded as incomplete with the counts still found.

The evidence queries are run as literal SQL (parameters bound client-side by psycopg) so the
register keeps exactly the text that ran and its result. `recheck` runs them again later.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

import pandas as pd
import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.store.base import PutOp
from langgraph.store.postgres import PostgresStore
from psycopg import sql
from psycopg.types.json import Jsonb

from core import read_replica
from core.agents.retail import METADATA_KEY
from core.db import Database
from core.memory.store import InvalidIdentifier, validate_label

log = logging.getLogger(__name__)

ROOT = "clientes"
CLIENTE_KEY = METADATA_KEY[ROOT]  # "cliente_id": what run_turn puts in checkpoint metadata
PAGE_SIZE = 1000  # items per search page and per delete batch
MAX_PASSES = 5  # rounds of "delete everything, count again" before reporting live writes
ERASURE_LOCK_NS = 0x6572  # advisory lock (ns, hashtext(customer)): one erasure of a customer at a time

# Tables erasure must never touch: the proof itself and the migrations bookkeeping.
PROTECTED_TABLES = frozenset({"core_erasure_register", "core_erasure_rechecks", "core_schema_migrations"})
# Tables kept by triggers on `store` (documents per prefix): counted in the evidence (they name the
# prefix, so they must reach 0 too) but never deleted from directly, which would break their counts.
DERIVED_TABLES = frozenset({"core_prefix_counts"})

# --- evidence queries (the seed's two, corrected for nested namespaces, plus the checkpoint tables)

STORE_ZERO_SQL = r"SELECT count(*) AS n FROM store WHERE prefix = %(prefix)s OR prefix LIKE %(pattern)s ESCAPE '\'"
VECTORS_ZERO_SQL = (
    r"SELECT count(*) AS n FROM store_vectors WHERE prefix = %(prefix)s OR prefix LIKE %(pattern)s ESCAPE '\'"
)
CHECKPOINTS_ZERO_SQL = (
    "SELECT count(*) AS n FROM checkpoints "
    "WHERE thread_id = ANY(%(threads)s) OR metadata->>'" + CLIENTE_KEY + "' = %(cliente_id)s"
)
CHECKPOINT_BLOBS_ZERO_SQL = "SELECT count(*) AS n FROM checkpoint_blobs WHERE thread_id = ANY(%(threads)s)"
CHECKPOINT_WRITES_ZERO_SQL = "SELECT count(*) AS n FROM checkpoint_writes WHERE thread_id = ANY(%(threads)s)"
STORE_TABLES = ("store", "store_vectors")  # the two queries the DPO shows verbatim
FIXED_QUERIES: dict[str, str] = {
    "store": STORE_ZERO_SQL,
    "store_vectors": VECTORS_ZERO_SQL,
    "checkpoints": CHECKPOINTS_ZERO_SQL,
    "checkpoint_blobs": CHECKPOINT_BLOBS_ZERO_SQL,
    "checkpoint_writes": CHECKPOINT_WRITES_ZERO_SQL,
}

SELECT_NAMESPACES = r"""
SELECT prefix, count(*) AS documents FROM store
WHERE prefix = %(prefix)s OR prefix LIKE %(pattern)s ESCAPE '\'
GROUP BY prefix ORDER BY prefix"""
SELECT_THREADS = """
SELECT thread_id FROM checkpoints WHERE metadata->>'""" + CLIENTE_KEY + """' = %(cliente_id)s
UNION
SELECT thread_id FROM core_conversations WHERE subject_root = %(root)s AND subject_id = %(cliente_id)s
UNION
SELECT unnest(thread_ids) FROM core_erasure_register WHERE customer_id = %(cliente_id)s"""
# Our tables that may name a customer, found by their columns (so a table added later is covered).
# pg_catalog rather than information_schema: this runs at every erasure and every re-check.
CUSTOMER_COLUMNS = ("prefix", "thread_id", "subject_root", "subject_id", "cliente_id", "customer_id")
# JSON arrays in our tables whose elements can name a customer: (table, column, element condition
# on `elem`). Matching elements are removed, the row (an operations record) stays.
JSON_ARRAY_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("core_degradation_episodes", "denials",  # [{tool, risk, thread_id, customer_id, denied_at}]
     "elem->>'customer_id' = %(cliente_id)s OR elem->>'thread_id' = ANY(%(threads)s)"),
    ("core_sweep_log", "threads_sample", "elem #>> '{}' = ANY(%(threads)s)"),  # ["thread id", ...]
)
SELECT_OWN_COLUMNS = r"""
SELECT c.relname::text AS table_name, a.attname::text AS column_name, format_type(a.atttypid, a.atttypmod) AS type
FROM pg_class c
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
  AND c.relname LIKE 'core\_%%' AND (a.attname = ANY(%(columns)s) OR c.relname || '.' || a.attname = ANY(%(json)s))
ORDER BY 1, 2"""
# Tables named in the design whose absence is normal (created by other modules' migrations).
OPTIONAL_TABLES = ("core_guard_denials",)
SELECT_REGCLASS = "SELECT to_regclass(%s) IS NOT NULL AS present"

INSERT_REQUEST = """
INSERT INTO core_erasure_register (customer_id, namespace_prefix, operator, counts_before)
VALUES (%s, %s, %s, %s) RETURNING id, requested_at"""
FINISH_REQUEST = """
UPDATE core_erasure_register
SET finished_at = now(), status = %(status)s, passes = %(passes)s, thread_ids = %(threads)s,
    deleted = %(deleted)s, counts_after = %(after)s, evidence = %(evidence)s, report = %(report)s
WHERE id = %(id)s RETURNING finished_at"""
SELECT_REQUEST = "SELECT * FROM core_erasure_register WHERE id = %s"
INSERT_RECHECK = """
INSERT INTO core_erasure_rechecks (request_id, trigger, operator, clean, counts, evidence)
VALUES (%s, %s, %s, %s, %s, %s) RETURNING id, checked_at"""
UPDATE_LAST_RECHECK = "UPDATE core_erasure_register SET last_recheck_at = %s, last_recheck_clean = %s WHERE id = %s"
# The latest finished request per customer: what a re-check has to hold true.
SELECT_RECHECKABLE = """
SELECT DISTINCT ON (customer_id) id FROM core_erasure_register
WHERE status IN ('complete', 'incomplete') ORDER BY customer_id, requested_at DESC, id DESC"""
SELECT_REGISTER = """
SELECT r.id, r.customer_id, r.operator, r.status, r.requested_at, r.finished_at,
       extract(epoch FROM r.finished_at - r.requested_at) AS seconds_to_zero,
       r.passes, r.counts_before, r.deleted, r.counts_after, r.report,
       r.last_recheck_at, r.last_recheck_clean,
       (SELECT count(*) FROM core_erasure_rechecks k WHERE k.request_id = r.id) AS rechecks,
       (SELECT count(*) FROM core_erasure_rechecks k WHERE k.request_id = r.id AND NOT k.clean) AS rechecks_dirty
FROM core_erasure_register r ORDER BY r.requested_at DESC, r.id DESC LIMIT %s"""
SELECT_RECHECKS = """
SELECT id, request_id, checked_at, trigger, operator, clean, counts, evidence
FROM core_erasure_rechecks WHERE request_id = %s ORDER BY checked_at DESC, id DESC"""


class ErasureError(RuntimeError):
    """The erasure could not run (e.g. the register row is missing); nothing is hidden."""


@dataclass(frozen=True)
class EvidenceQuery:
    """One zero-count query exactly as it ran, its result and when (ISO 8601, UTC)."""

    table: str
    sql: str
    result: int
    at: str


@dataclass(frozen=True)
class Preview:
    """What an erasure of `customer_id` would delete now (dry run)."""

    customer_id: str
    namespace_prefix: str
    counts: dict[str, int]
    namespaces: list[tuple[str, int]]
    thread_ids: list[str]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass
class ErasureResult:
    request_id: int
    customer_id: str
    namespace_prefix: str
    operator: str
    status: str  # complete / incomplete / failed
    passes: int
    requested_at: datetime
    finished_at: datetime | None
    counts_before: dict[str, int]
    deleted: dict[str, int]
    counts_after: dict[str, int]
    evidence: list[EvidenceQuery]
    thread_ids: list[str]
    report: str | None = None

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    @property
    def store_evidence(self) -> list[EvidenceQuery]:
        """The two store queries (store, store_vectors) the DPO shows verbatim."""
        return [e for e in self.evidence if e.table in STORE_TABLES]


@dataclass(frozen=True)
class RecheckResult:
    request_id: int
    customer_id: str
    clean: bool
    counts: dict[str, int]
    evidence: list[EvidenceQuery]
    checked_at: datetime
    trigger: str


@dataclass(frozen=True)
class Progress:
    """A step of a running erasure, for a progress display: `step` is one of
    counting / store / threads / logs / evidence / done; `deleted` is the running total."""

    step: str
    pass_no: int
    deleted: int = 0
    detail: dict[str, int] = field(default_factory=dict)


ProgressFn = Callable[[Progress], None]


# --- helpers -----------------------------------------------------------------------------------


def escape_like(text: str) -> str:
    """`text` as a literal inside a LIKE pattern with ESCAPE '\\'."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def validate_customer_id(customer_id: Any) -> str:
    """The id if it is a valid namespace label, else InvalidIdentifier with a clear message."""
    return validate_label(customer_id, "customer id")


def _params(customer_id: str, thread_ids: Iterable[str]) -> dict[str, Any]:
    prefix = f"{ROOT}.{customer_id}"
    return {
        "prefix": prefix,
        "pattern": escape_like(prefix) + ".%",
        "cliente_id": customer_id,
        "root": ROOT,
        "threads": sorted(set(thread_ids)),
    }


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class OwnTarget:
    """Rows (or JSON array elements) of one of our tables that name the customer."""

    name: str  # table, or table.column for JSON array elements
    count_sql: str
    erase_sql: str | None  # None: derived from `store`, emptied by its triggers


def _row_target(table: str, condition: str) -> OwnTarget:
    ident, cond = sql.Identifier(table), sql.SQL(condition)
    return OwnTarget(
        table,
        sql.SQL("SELECT count(*) AS n FROM {} WHERE {}").format(ident, cond).as_string(),
        sql.SQL("DELETE FROM {} WHERE {}").format(ident, cond).as_string(),
    )


def _json_array_target(table: str, column: str, condition: str) -> OwnTarget:
    fmt = {"t": sql.Identifier(table), "c": sql.Identifier(column), "cond": sql.SQL(condition)}
    elements = "jsonb_array_elements(CASE WHEN jsonb_typeof({c}) = 'array' THEN {c} ELSE '[]'::jsonb END)"
    count = sql.SQL("SELECT count(*) AS n FROM {t}, " + elements + " AS x(elem) WHERE COALESCE({cond}, false)")
    erase = sql.SQL(
        "UPDATE {t} SET {c} = COALESCE((SELECT jsonb_agg(x.elem ORDER BY x.ord) FROM jsonb_array_elements({c}) "
        "WITH ORDINALITY AS x(elem, ord) WHERE NOT COALESCE({cond}, false)), '[]'::jsonb) "
        "WHERE jsonb_typeof({c}) = 'array' AND EXISTS (SELECT 1 FROM jsonb_array_elements({c}) AS x(elem) "
        "WHERE COALESCE({cond}, false))"
    )
    return OwnTarget(f"{table}.{column}", count.format(**fmt).as_string(), erase.format(**fmt).as_string())


def own_targets(conn: psycopg.Connection) -> list[OwnTarget]:
    """Every place in our `core_*` tables that can name a customer (never the register itself):
    rows found by their columns, and elements of the known JSON arrays."""
    json_names = {f"{t}.{c}": (t, c, cond) for t, c, cond in JSON_ARRAY_COLUMNS}
    columns_of: dict[str, set[str]] = {}
    json_found: list[tuple[str, str, str]] = []
    rows = conn.execute(SELECT_OWN_COLUMNS, {"columns": list(CUSTOMER_COLUMNS), "json": list(json_names)}).fetchall()
    for row in rows:
        table, column = row["table_name"], row["column_name"]
        if f"{table}.{column}" in json_names and row["type"] == "jsonb":
            json_found.append(json_names[f"{table}.{column}"])
        if column in CUSTOMER_COLUMNS:
            columns_of.setdefault(table, set()).add(column)
    targets: list[OwnTarget] = []
    for table, columns in columns_of.items():
        if table in PROTECTED_TABLES:
            continue
        parts = []
        if "prefix" in columns:
            parts.append(r"(prefix::text = %(prefix)s OR prefix::text LIKE %(pattern)s ESCAPE '\')")
        if "thread_id" in columns:
            parts.append("thread_id::text = ANY(%(threads)s)")
        if {"subject_root", "subject_id"} <= columns:
            parts.append("(subject_root::text = %(root)s AND subject_id::text = %(cliente_id)s)")
        for column in ("cliente_id", "customer_id"):
            if column in columns:
                parts.append(f"{column}::text = %(cliente_id)s")
        if parts:
            target = _row_target(table, " OR ".join(parts))
            targets.append(OwnTarget(table, target.count_sql, None) if table in DERIVED_TABLES else target)
    targets += [_json_array_target(*found) for found in json_found]
    names = {t.name for t in targets}
    for optional in OPTIONAL_TABLES:  # present but not understood must be said, not skipped silently
        if optional not in names and conn.execute(SELECT_REGCLASS, (optional,)).fetchone()["present"]:
            log.warning("%s exists but has no column erasure knows (prefix, thread_id, subject_id, customer_id)",
                        optional)
    return targets


def _run_evidence(conn: psycopg.Connection, targets: list[OwnTarget], customer_id: str,
                  thread_ids: Iterable[str]) -> list[EvidenceQuery]:
    """Every zero-count query, made literal (parameters bound by psycopg's client-side quoting) and
    sent in one pipeline: what is recorded is exactly the text that ran."""
    params = _params(customer_id, thread_ids)
    queries = dict(FIXED_QUERIES) | {t.name: t.count_sql for t in targets}
    binder = psycopg.ClientCursor(conn)
    literal = {table: binder.mogrify(query, params).strip() for table, query in queries.items()}
    cursors = {}
    with conn.pipeline():
        for table, text in literal.items():
            cursors[table] = conn.cursor()
            cursors[table].execute(text)
    at = _now_iso()
    return [EvidenceQuery(table, literal[table], int(cur.fetchone()["n"]), at) for table, cur in cursors.items()]


def _find_threads(conn: psycopg.Connection, customer_id: str) -> list[str]:
    rows = conn.execute(SELECT_THREADS, _params(customer_id, ())).fetchall()
    return sorted(r["thread_id"] for r in rows if r["thread_id"] is not None)


def run_evidence(db: Database, customer_id: str, thread_ids: Iterable[str]) -> list[EvidenceQuery]:
    """Run every zero-count query as literal SQL on the primary; return text, result and time."""
    with db.connection() as conn:
        return _run_evidence(conn, own_targets(conn), customer_id, thread_ids)


def find_threads(db: Database, customer_id: str) -> list[str]:
    """The customer's checkpoint threads: by checkpoint metadata, conversations and earlier requests."""
    with db.connection() as conn:
        return _find_threads(conn, customer_id)


def preview(db: Database, customer_id: str) -> Preview:
    """Dry run: rows per table an erasure of `customer_id` would delete now. Raises InvalidIdentifier."""
    customer_id = validate_customer_id(customer_id)
    with db.connection() as conn:
        threads = _find_threads(conn, customer_id)
        counts = {e.table: e.result for e in _run_evidence(conn, own_targets(conn), customer_id, threads)}
        namespaces = [(r["prefix"], int(r["documents"]))
                      for r in conn.execute(SELECT_NAMESPACES, _params(customer_id, ())).fetchall()]
    return Preview(customer_id, f"{ROOT}.{customer_id}", counts, namespaces, threads)


# --- the erasure --------------------------------------------------------------------------------


def _erase_store(store: PostgresStore, ns: tuple[str, str], page_size: int) -> int:
    """Delete every item under `ns` (nested too): search a page, delete it, until a search is empty."""
    deleted = 0
    while True:
        # offset 0 every time: the previous page is gone, and new writes are picked up too
        items = store.search(ns, limit=page_size, offset=0, refresh_ttl=False)
        if not items:
            return deleted
        store.batch([PutOp(tuple(item.namespace), item.key, None) for item in items])
        deleted += len(items)


def _erase_threads(saver: PostgresSaver, thread_ids: Iterable[str]) -> int:
    n = 0
    for thread_id in thread_ids:
        saver.delete_thread(thread_id)
        n += 1
    return n


def _erase_own(conn: psycopg.Connection, targets: list[OwnTarget], customer_id: str,
               thread_ids: Iterable[str]) -> dict[str, int]:
    """Delete (or scrub from JSON arrays) what our tables hold about the customer; counts per target."""
    params = _params(customer_id, thread_ids)
    deleted: dict[str, int] = {}
    for target in targets:
        if target.erase_sql is None:
            continue
        if target.erase_sql.startswith("DELETE"):
            deleted[target.name] = conn.execute(target.erase_sql, params).rowcount
            continue
        with conn.transaction():  # an UPDATE's rowcount counts rows, not the elements it removes
            n = conn.execute(target.count_sql, params).fetchone()["n"]
            if n:
                conn.execute(target.erase_sql, params)
        deleted[target.name] = int(n)
    return deleted


def _add(total: dict[str, int], more: dict[str, int]) -> None:
    for k, v in more.items():
        total[k] = total.get(k, 0) + v


def erase(
    db: Database,
    customer_id: str,
    *,
    operator: str,
    max_passes: int = MAX_PASSES,
    page_size: int = PAGE_SIZE,
    progress: ProgressFn | None = None,
) -> ErasureResult:
    """Erase everything the agents' memory holds about `customer_id` and record it in the register.

    Raises InvalidIdentifier (nothing deleted, nothing recorded) for an unusable id, ValueError for
    an empty operator. Returns the result with status `complete` (every evidence query 0) or
    `incomplete` (writes kept arriving for `max_passes` passes; `report` says what remained).
    A failure midway is recorded as `failed` and re-raised.
    """
    customer_id = validate_customer_id(customer_id)
    if not isinstance(operator, str) or not operator.strip():
        raise ValueError("operator identity is required for the erasure register")
    if max_passes < 1:
        raise ValueError(f"max_passes must be at least 1, got {max_passes}")
    notify = progress or (lambda _p: None)
    ns = (ROOT, customer_id)
    prefix = f"{ROOT}.{customer_id}"
    store = PostgresStore(db.pool)  # no TTL config: expired rows are listed (and erased) too
    saver = PostgresSaver(db.pool)

    # One connection holds the lock and runs our own statements; the store and the checkpointer
    # use the pool, exactly as the agents do.
    with db.connection() as conn:
        # two DPOs erasing the same customer take turns; the second one then finds zero
        conn.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (ERASURE_LOCK_NS, customer_id))
        try:
            notify(Progress("counting", 0))
            targets = own_targets(conn)
            threads = set(_find_threads(conn, customer_id))
            before = {e.table: e.result for e in _run_evidence(conn, targets, customer_id, threads)}
            row = conn.execute(INSERT_REQUEST, (customer_id, prefix, operator.strip(), Jsonb(before))).fetchone()
            request_id, requested_at = row["id"], row["requested_at"]
            deleted: dict[str, int] = {}
            evidence: list[EvidenceQuery] = []
            found = before  # what the latest count saw: our tables at 0 need no statement
            passes = 0
            try:
                for passes in range(1, max_passes + 1):
                    n = _erase_store(store, ns, page_size)
                    _add(deleted, {"store": n})
                    notify(Progress("store", passes, sum(deleted.values()), dict(deleted)))
                    threads |= set(_find_threads(conn, customer_id))
                    _erase_threads(saver, sorted(threads))
                    notify(Progress("threads", passes, sum(deleted.values()), {"threads": len(threads)}))
                    _add(deleted, _erase_own(conn, [t for t in targets if found.get(t.name)], customer_id, threads))
                    notify(Progress("logs", passes, sum(deleted.values()), dict(deleted)))
                    evidence = _run_evidence(conn, targets, customer_id, threads)
                    found = {e.table: e.result for e in evidence}
                    notify(Progress("evidence", passes, sum(deleted.values()), {e.table: e.result for e in evidence}))
                    if all(e.result == 0 for e in evidence):
                        break
                after = {e.table: e.result for e in evidence}
                # rows removed by cascades, delete_thread and triggers, which report no count: before - after
                for table in ("store_vectors", "checkpoints", "checkpoint_blobs", "checkpoint_writes", *DERIVED_TABLES):
                    if table in before:
                        deleted[table] = max(0, before[table] - after.get(table, 0))
                remaining = {t: n for t, n in after.items() if n}
                status = "complete" if not remaining else "incomplete"
                report = None if not remaining else (
                    f"writes kept arriving: after {passes} passes these rows remain: "
                    + ", ".join(f"{t}={n}" for t, n in sorted(remaining.items()))
                    + "; erase again once the agents serving this customer are stopped"
                )
            except Exception as exc:
                conn.execute(FINISH_REQUEST, {
                    "id": request_id, "status": "failed", "passes": passes, "threads": sorted(threads),
                    "deleted": Jsonb(deleted), "after": None, "evidence": Jsonb([asdict(e) for e in evidence]),
                    "report": f"{type(exc).__name__}: {exc}"})
                raise
            finished = conn.execute(FINISH_REQUEST, {
                "id": request_id, "status": status, "passes": passes, "threads": sorted(threads),
                "deleted": Jsonb(deleted), "after": Jsonb(after), "evidence": Jsonb([asdict(e) for e in evidence]),
                "report": report}).fetchone()
            notify(Progress("done", passes, sum(deleted.values()), after))
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (ERASURE_LOCK_NS, customer_id))
    if report:
        log.warning("erasure %s of %s incomplete: %s", request_id, customer_id, report)
    read_replica.wait_replayed(db)  # bounded: the pages that read the replica next see the erasure
    return ErasureResult(
        request_id=request_id, customer_id=customer_id, namespace_prefix=prefix, operator=operator.strip(),
        status=status, passes=passes, requested_at=requested_at, finished_at=finished["finished_at"],
        counts_before=before, deleted=deleted, counts_after=after, evidence=evidence,
        thread_ids=sorted(threads), report=report,
    )


# --- re-check -------------------------------------------------------------------------------------


def recheck(db: Database, request_id: int, *, trigger: str = "manual", operator: str | None = None) -> RecheckResult:
    """Run the evidence queries of request `request_id` again (its threads and any new ones) and record
    the result in `core_erasure_rechecks`. `clean` is False when data came back. Raises ErasureError
    for an unknown request."""
    row = db.fetch_one(SELECT_REQUEST, (request_id,), read_only=False)
    if row is None:
        raise ErasureError(f"no erasure request {request_id}")
    customer_id = row["customer_id"]
    with db.connection() as conn:
        threads = set(row["thread_ids"] or ()) | set(_find_threads(conn, customer_id))
        evidence = _run_evidence(conn, own_targets(conn), customer_id, threads)
    # on a replicated setup: the replica has replayed past the primary's WAL after this evidence
    evidence += [EvidenceQuery(*row) for row in read_replica.replay_evidence(db)]
    counts = {e.table: e.result for e in evidence}
    clean = all(n == 0 for n in counts.values())
    rec = db.fetch_one(INSERT_RECHECK, (request_id, trigger, operator, clean, Jsonb(counts),
                                        Jsonb([asdict(e) for e in evidence])), read_only=False)
    db.execute(UPDATE_LAST_RECHECK, (rec["checked_at"], clean, request_id))
    if not clean:
        log.warning("erasure %s of %s: data came back: %s", request_id, customer_id,
                    {t: n for t, n in counts.items() if n})
    return RecheckResult(request_id, customer_id, clean, counts, evidence, rec["checked_at"], trigger)


class RecheckSummary(list):
    """The re-check results (a list); its text names request numbers only, never a customer, because
    the sweep job stores it in its log, which erasure does not scrub of customer ids."""

    def __str__(self) -> str:
        dirty = [r.request_id for r in self if not r.clean]
        text = f"re-checked {len(self)} erasure request(s): {len(self) - len(dirty)} clean"
        if dirty:
            text += f", {len(dirty)} with data back (request " + ", ".join(f"#{i}" for i in dirty) + ")"
        return text


def recheck_all(db: Database, *, trigger: str = "sweep", operator: str | None = None) -> RecheckSummary:
    """Re-check the latest finished request of every erased customer (the sweep job calls this)."""
    ids = [r["id"] for r in db.fetch(SELECT_RECHECKABLE, read_only=False)]
    return RecheckSummary(recheck(db, request_id, trigger=trigger, operator=operator) for request_id in ids)


# --- reading the register -------------------------------------------------------------------------


def register(db: Database, limit: int = 500) -> pd.DataFrame:
    """The latest `limit` requests, newest first, with time to zero, whether it reached zero the same day
    (UTC), and `came_back` (the last re-check found data again). Counts are totals over the tables."""
    rows = db.fetch(SELECT_REGISTER, (limit,), read_only=False)
    frame = pd.DataFrame(rows, columns=[
        "id", "customer_id", "operator", "status", "requested_at", "finished_at", "seconds_to_zero", "passes",
        "counts_before", "deleted", "counts_after", "report", "last_recheck_at", "last_recheck_clean", "rechecks",
        "rechecks_dirty"])
    frame["seconds_to_zero"] = frame["seconds_to_zero"].astype(float)
    frame["same_day"] = [
        bool(f is not None and not pd.isna(f) and s == "complete" and f.astimezone(timezone.utc).date()
             == r.astimezone(timezone.utc).date())
        for r, f, s in zip(frame["requested_at"], frame["finished_at"], frame["status"])
    ]
    frame["came_back"] = [v is not None and not pd.isna(v) and not bool(v) for v in frame["last_recheck_clean"]]
    for col in ("counts_before", "deleted", "counts_after"):
        frame[col] = frame[col].map(lambda d: sum(d.values()) if isinstance(d, dict) else None)
    return frame


def rechecks(db: Database, request_id: int) -> pd.DataFrame:
    """Every re-check of one request, newest first (counts and evidence as recorded)."""
    rows = db.fetch(SELECT_RECHECKS, (request_id,), read_only=False)
    return pd.DataFrame(rows, columns=["id", "request_id", "checked_at", "trigger", "operator", "clean", "counts",
                                       "evidence"])


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def evidence_document(db: Database, request_id: int) -> dict[str, Any]:
    """The request as recorded, with its re-checks: what the DPO downloads as evidence."""
    row = db.fetch_one(SELECT_REQUEST, (request_id,), read_only=False)
    if row is None:
        raise ErasureError(f"no erasure request {request_id}")
    checks = db.fetch(SELECT_RECHECKS, (request_id,), read_only=False)
    doc = {"kind": "agent-memory erasure evidence", "generated_at": _now_iso(), "request": dict(row),
           "rechecks": [dict(c) for c in checks]}
    return json.loads(json.dumps(doc, default=_json_default))


def evidence_json(db: Database, request_id: int) -> str:
    return json.dumps(evidence_document(db, request_id), ensure_ascii=False, indent=2)


# --- demo -----------------------------------------------------------------------------------------

SELECT_DEMO_CANDIDATE = """
SELECT c.subject_id AS customer_id
FROM core_conversations c
WHERE c.subject_root = %(root)s AND NOT (c.subject_id = ANY(%(exclude)s))
  AND EXISTS (SELECT 1 FROM store s WHERE s.prefix = %(root)s || '.' || c.subject_id)
GROUP BY c.subject_id
ORDER BY length(c.subject_id) DESC, c.subject_id DESC LIMIT 1"""


def erase_demo_customer(db: Database, *, exclude: Iterable[str] = (), operator: str = "demo") -> ErasureResult | None:
    """A real erasure of one demo customer who has documents (the highest id not in `exclude`),
    so the register has a request to show. None if no customer qualifies."""
    row = db.fetch_one(SELECT_DEMO_CANDIDATE, {"root": ROOT, "exclude": list(exclude)}, read_only=False)
    if row is None:
        return None
    started = time.monotonic()
    result = erase(db, row["customer_id"], operator=operator)
    log.info("demo erasure of %s: %s in %.2f s", result.customer_id, result.status, time.monotonic() - started)
    return result


__all__ = [
    "ErasureError", "ErasureResult", "EvidenceQuery", "InvalidIdentifier", "Preview", "Progress", "RecheckResult",
    "RecheckSummary",
    "erase", "erase_demo_customer", "evidence_document", "evidence_json", "find_threads", "preview", "recheck",
    "recheck_all", "register", "rechecks", "run_evidence",
]
