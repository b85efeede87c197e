"""Erasure of one customer: everything the agents' memory holds about them, with evidence.

What is deleted, in each pass, until a pass ends with every evidence query at zero:
1. the store: `store.search` over the prefix `("clientes", id)` (nested namespaces included, expired
   rows included) page by page until nothing is left, each page deleted with one
   `store.batch([PutOp(ns, key, None), ...])`; `store_vectors` rows go with them (ON DELETE CASCADE);
2. the customer's checkpoint threads, each with the checkpointer's `delete_thread`: the threads the subject
   resolver attributes (core/privacy/subjects.py: metadata keys, thread-id patterns, `hilo` links read
   before the documents go, our conversation log, earlier requests, the configured query), plus the
   residue threads the DPO chose to include. A residue thread the DPO leaves needs a reason; it is named
   in the register and the evidence (status `complete` with exclusions). One nobody decided on makes the
   request `incomplete`. Every erased thread gets a row in `core_thread_tombstones` first, so a degraded
   replica does not bring it back;
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
from typing import Any, Callable, Iterable, Mapping

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
from core.privacy import subjects as subj

log = logging.getLogger(__name__)

ROOT = "clientes"
CLIENTE_KEY = METADATA_KEY[ROOT]  # "cliente_id": what run_turn puts in checkpoint metadata
PAGE_SIZE = 1000  # items per search page and per delete batch
MAX_PASSES = 5  # rounds of "delete everything, count again" before reporting live writes
ERASURE_LOCK_NS = 0x6572  # advisory lock (ns, hashtext(customer)): one erasure of a customer at a time

# Tables erasure must never touch: the proof itself and the migrations bookkeeping.
PROTECTED_TABLES = frozenset({"core_erasure_register", "core_erasure_rechecks", "core_schema_migrations",
                              "core_thread_tombstones"})
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
# With the configured metadata keys (default cliente_id, customer_id, user_id) in place of cliente_id.
CHECKPOINTS_ZERO_KEYS_SQL = (
    "SELECT count(*) AS n FROM checkpoints WHERE thread_id = ANY(%(threads)s) OR {keys}"
)
# The residue evidence: the raw-bytes filter of subjects.RESIDUE_CANDIDATES_SQL over every thread but those
# the DPO left, with the distinctive terms read before the erasure; the result counts decoder-confirmed threads.
RESIDUE_TABLE = "residue"
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
INSERT INTO core_erasure_register (customer_id, namespace_prefix, operator, counts_before, thread_ids, sources,
                                   residue, residue_terms, exclusions)
VALUES (%(customer_id)s, %(prefix)s, %(operator)s, %(before)s, %(threads)s, %(sources)s, %(residue)s, %(terms)s,
        %(exclusions)s)
RETURNING id, requested_at"""
FINISH_REQUEST = """
UPDATE core_erasure_register
SET finished_at = now(), status = %(status)s, passes = %(passes)s, thread_ids = %(threads)s,
    deleted = %(deleted)s, counts_after = %(after)s, evidence = %(evidence)s, report = %(report)s
WHERE id = %(id)s RETURNING finished_at"""
INSERT_TOMBSTONES = """
INSERT INTO core_thread_tombstones (thread_id, request_id)
SELECT unnest(%(threads)s::text[]), %(id)s
ON CONFLICT (thread_id) DO UPDATE SET request_id = EXCLUDED.request_id"""
MARK_RESUMED = "UPDATE core_erasure_register SET resumed_by = %s WHERE id = %s"
# A `running` row whose customer lock nobody holds: the process that ran it is gone.
SELECT_RUNNING = "SELECT id, customer_id FROM core_erasure_register WHERE status = 'running' ORDER BY id"
TRY_LOCK = "SELECT pg_try_advisory_lock(%s, hashtext(%s)) AS got"
UNLOCK = "SELECT pg_advisory_unlock(%s, hashtext(%s))"
SELECT_REQUEST = "SELECT * FROM core_erasure_register WHERE id = %s"
INSERT_RECHECK = """
INSERT INTO core_erasure_rechecks (request_id, trigger, operator, clean, counts, evidence)
VALUES (%s, %s, %s, %s, %s, %s) RETURNING id, checked_at"""
UPDATE_LAST_RECHECK = "UPDATE core_erasure_register SET last_recheck_at = %s, last_recheck_clean = %s WHERE id = %s"
# The latest finished request per customer: what a re-check has to hold true.
SELECT_RECHECKABLE = """
SELECT DISTINCT ON (customer_id) id FROM core_erasure_register
WHERE status IN ('complete', 'incomplete', 'failed', 'interrupted', 'running')
ORDER BY customer_id, requested_at DESC, id DESC"""
SELECT_REGISTER = """
SELECT r.id, r.customer_id, r.operator, r.status, r.requested_at, r.finished_at,
       jsonb_array_length(coalesce(r.exclusions, '[]')) AS exclusions, r.resumed_by,
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
    subjects: subj.Subjects | None = None  # which source found which thread
    residue: subj.Residue | None = None  # unattributed threads holding the customer's id or values

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def residue_threads(self) -> list[str]:
        return self.residue.proposed if self.residue else []


@dataclass
class ErasureResult:
    request_id: int
    customer_id: str
    namespace_prefix: str
    operator: str
    status: str  # complete / incomplete / failed / interrupted
    passes: int
    requested_at: datetime
    finished_at: datetime | None
    counts_before: dict[str, int]
    deleted: dict[str, int]
    counts_after: dict[str, int]
    evidence: list[EvidenceQuery]
    thread_ids: list[str]
    report: str | None = None
    exclusions: list[dict] = field(default_factory=list)  # residue threads left by the DPO, with the reason
    residue: list[dict] = field(default_factory=list)  # every residue thread and what was decided
    sources: dict[str, list[str]] = field(default_factory=dict)  # thread_id -> sources that attributed it

    @property
    def complete(self) -> bool:
        """Complete: every evidence query 0 and every residue thread erased or left with a reason
        (`exclusions` names those left)."""
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


def _checkpoints_zero_sql(keys: Iterable[str]) -> str:
    """The checkpoints evidence query with the configured metadata keys (or threads only, if none)."""
    conds = [sql.SQL("metadata->>{} = %(cliente_id)s").format(sql.Literal(k)) for k in keys]
    cond = sql.SQL(" OR ").join(conds) if conds else sql.SQL("false")
    return sql.SQL(CHECKPOINTS_ZERO_KEYS_SQL).format(keys=cond).as_string()


def _run_evidence(conn: psycopg.Connection, targets: list[OwnTarget], customer_id: str,
                  thread_ids: Iterable[str], keys: Iterable[str] = (CLIENTE_KEY,),
                  residue_terms: list[subj.Term] | None = None, left: Iterable[str] = ()) -> list[EvidenceQuery]:
    """Every zero-count query, made literal (parameters bound by psycopg's client-side quoting) and
    sent in one pipeline: what is recorded is exactly the text that ran. With `residue_terms`, the
    residue scan too (every thread but `left`; result = threads the decoder confirmed)."""
    params = _params(customer_id, thread_ids)
    queries = dict(FIXED_QUERIES) | {"checkpoints": _checkpoints_zero_sql(keys)} | {t.name: t.count_sql for t in targets}
    binder = psycopg.ClientCursor(conn)
    literal = {table: binder.mogrify(query, params).strip() for table, query in queries.items()}
    cursors = {}
    with conn.pipeline():
        for table, text in literal.items():
            cursors[table] = conn.cursor()
            cursors[table].execute(text)
    at = _now_iso()
    out = [EvidenceQuery(table, literal[table], int(cur.fetchone()["n"]), at) for table, cur in cursors.items()]
    rparams = subj.residue_count_params(residue_terms or (), left)
    if rparams["raws"]:
        text = binder.mogrify(subj.RESIDUE_COUNT_SQL, rparams).strip()
        out.append(EvidenceQuery(RESIDUE_TABLE, text, int(conn.execute(text).fetchone()["n"]), _now_iso()))
    return out


def _config(config: subj.Attribution | None) -> subj.Attribution:
    return config or subj.Attribution.from_settings()


def _find_threads(conn: psycopg.Connection, customer_id: str, config: subj.Attribution | None = None) -> list[str]:
    return subj.resolve_conn(conn, customer_id, _config(config)).thread_ids


def run_evidence(db: Database, customer_id: str, thread_ids: Iterable[str],
                 config: subj.Attribution | None = None) -> list[EvidenceQuery]:
    """Run every zero-count query as literal SQL on the primary; return text, result and time."""
    with db.connection() as conn:
        return _run_evidence(conn, own_targets(conn), customer_id, thread_ids, _config(config).metadata_keys)


def find_threads(db: Database, customer_id: str, config: subj.Attribution | None = None) -> list[str]:
    """The customer's checkpoint threads, as the subject resolver attributes them (every source)."""
    with db.connection() as conn:
        return _find_threads(conn, validate_customer_id(customer_id), config)


def preview(db: Database, customer_id: str, config: subj.Attribution | None = None) -> Preview:
    """Dry run: rows per table an erasure of `customer_id` would delete now, the attributed threads with their
    sources, and the residue threads the DPO has to decide on. Raises InvalidIdentifier."""
    customer_id = validate_customer_id(customer_id)
    config = _config(config)
    with db.connection() as conn:
        subjects = subj.resolve_conn(conn, customer_id, config)
        threads = subjects.thread_ids
        counts = {e.table: e.result
                  for e in _run_evidence(conn, own_targets(conn), customer_id, threads, config.metadata_keys)}
        namespaces = [(r["prefix"], int(r["documents"]))
                      for r in conn.execute(SELECT_NAMESPACES, _params(customer_id, ())).fetchall()]
        residue = subj.residue_conn(conn, customer_id, subjects.threads)
    return Preview(customer_id, f"{ROOT}.{customer_id}", counts, namespaces, threads, subjects, residue)


# --- the erasure --------------------------------------------------------------------------------

ERASE, LEAVE = "erase", "leave"


@dataclass(frozen=True)
class Decision:
    """The DPO's choice for one residue thread: erase it, or leave it with a reason."""

    action: str
    reason: str = ""


def _validate_decisions(decisions: Mapping[str, Any] | None) -> dict[str, Decision]:
    """{thread_id: Decision | (action, reason) | action}; ValueError before anything is touched if a thread is
    left without a reason or the action is unknown."""
    out: dict[str, Decision] = {}
    for thread_id, d in (decisions or {}).items():
        if isinstance(d, str):
            d = Decision(d)
        elif not isinstance(d, Decision):
            d = Decision(*d)
        if d.action not in (ERASE, LEAVE):
            raise ValueError(f"decision for thread {thread_id!r} must be {ERASE!r} or {LEAVE!r}, got {d.action!r}")
        if d.action == LEAVE and not (d.reason or "").strip():
            raise ValueError(f"leaving residue thread {thread_id!r} needs a reason (it goes into the register)")
        out[str(thread_id)] = Decision(d.action, (d.reason or "").strip())
    return out


def _decide(residue: subj.Residue, decisions: dict[str, Decision]) -> tuple[list[dict], set[str], list[dict], list[str]]:
    """(residue rows for the register, threads to erase, exclusions, undecided threads)."""
    rows, include, exclusions, undecided = [], set(), [], []
    for thread_id in residue.proposed:
        terms = sorted({m.term for m in residue.matches_of(thread_id)})
        d = decisions.get(thread_id)
        if d is None:
            undecided.append(thread_id)
            rows.append({"thread_id": thread_id, "terms": terms, "decision": "undecided", "reason": None})
        elif d.action == ERASE:
            include.add(thread_id)
            rows.append({"thread_id": thread_id, "terms": terms, "decision": ERASE, "reason": d.reason or None})
        else:
            exclusions.append({"thread_id": thread_id, "terms": terms, "reason": d.reason})
            rows.append({"thread_id": thread_id, "terms": terms, "decision": LEAVE, "reason": d.reason})
    return rows, include, exclusions, undecided


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
    decisions: Mapping[str, Any] | None = None,
    config: subj.Attribution | None = None,
    max_passes: int = MAX_PASSES,
    page_size: int = PAGE_SIZE,
    progress: ProgressFn | None = None,
) -> ErasureResult:
    """Erase everything the agents' memory holds about `customer_id` and record it in the register.

    `decisions` maps residue threads (see `preview().residue`) to `erase` or `("leave", reason)`; a residue
    thread without a decision is not deleted and makes the request `incomplete`.

    Raises InvalidIdentifier (nothing deleted, nothing recorded) for an unusable id, ValueError for
    an empty operator or a residue thread left without a reason. Returns the result with status `complete`
    (every evidence query 0, residue included, and every residue thread erased or left with a reason) or
    `incomplete` (`report` says what remained). A failure midway is recorded as `failed`, an interruption
    (a BaseException such as Streamlit's rerun or stop) as `interrupted`, both with their counts, and re-raised.
    """
    customer_id = validate_customer_id(customer_id)
    if not isinstance(operator, str) or not operator.strip():
        raise ValueError("operator identity is required for the erasure register")
    if max_passes < 1:
        raise ValueError(f"max_passes must be at least 1, got {max_passes}")
    chosen = _validate_decisions(decisions)
    config = _config(config)
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
        request_id = None
        try:
            notify(Progress("counting", 0))
            targets = own_targets(conn)
            # read before anything is deleted: the `hilo` links and the document values live in the store
            subjects = subj.resolve_conn(conn, customer_id, config)
            terms = subj.customer_terms(conn, customer_id)
            residue = subj.residue_conn(conn, customer_id, subjects.threads, terms)
            residue_rows, include, exclusions, undecided = _decide(residue, chosen)
            left = [e["thread_id"] for e in exclusions] + undecided
            evidence_terms = [t for t in terms if not t.common]
            sources = {t: list(s) for t, s in subjects.threads.items()} | {t: ["residue"] for t in include}
            threads = set(subjects.threads) | include

            def evidence_now() -> list[EvidenceQuery]:
                return _run_evidence(conn, targets, customer_id, threads, config.metadata_keys, evidence_terms, left)

            before = {e.table: e.result for e in evidence_now()}
            row = conn.execute(INSERT_REQUEST, {
                "customer_id": customer_id, "prefix": prefix, "operator": operator.strip(), "before": Jsonb(before),
                "threads": sorted(threads), "sources": Jsonb(sources), "residue": Jsonb(residue_rows),
                "terms": Jsonb([asdict(t) | {"common": t.common} for t in terms]),
                "exclusions": Jsonb(exclusions)}).fetchone()
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
                    again = subj.resolve_conn(conn, customer_id, config).threads
                    for t in set(again) - threads:
                        sources[t] = list(again[t])
                    threads |= set(again)
                    # tombstones first: a replica that replays its buffer later must not bring them back
                    conn.execute(INSERT_TOMBSTONES, {"threads": sorted(threads), "id": request_id})
                    _erase_threads(saver, sorted(threads))
                    notify(Progress("threads", passes, sum(deleted.values()), {"threads": len(threads)}))
                    _add(deleted, _erase_own(conn, [t for t in targets if found.get(t.name)], customer_id, threads))
                    notify(Progress("logs", passes, sum(deleted.values()), dict(deleted)))
                    evidence = evidence_now()
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
                status, report = _outcome(passes, remaining, undecided, exclusions)
            except BaseException as exc:
                # Streamlit's rerun/stop are BaseExceptions raised from `notify`: the row must not stay `running`
                _record_stop(db, conn, request_id, exc, passes, threads, deleted, evidence, targets, customer_id,
                             config)
                raise
            finished = conn.execute(FINISH_REQUEST, {
                "id": request_id, "status": status, "passes": passes, "threads": sorted(threads),
                "deleted": Jsonb(deleted), "after": Jsonb(after), "evidence": Jsonb([asdict(e) for e in evidence]),
                "report": report}).fetchone()
            notify(Progress("done", passes, sum(deleted.values()), after))
        finally:
            try:
                conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (ERASURE_LOCK_NS, customer_id))
            except psycopg.Error:  # a broken connection releases its session locks when it is closed
                log.warning("could not release the erasure lock of request %s", request_id)
    if report:
        (log.info if status == "complete" else log.warning)("erasure %s of %s %s: %s", request_id, customer_id,
                                                             status, report)
    read_replica.wait_replayed(db)  # bounded: the pages that read the replica next see the erasure
    return ErasureResult(
        request_id=request_id, customer_id=customer_id, namespace_prefix=prefix, operator=operator.strip(),
        status=status, passes=passes, requested_at=requested_at, finished_at=finished["finished_at"],
        counts_before=before, deleted=deleted, counts_after=after, evidence=evidence,
        thread_ids=sorted(threads), report=report, exclusions=exclusions, residue=residue_rows, sources=sources,
    )


def _outcome(passes: int, remaining: dict[str, int], undecided: list[str],
             exclusions: list[dict]) -> tuple[str, str | None]:
    parts = []
    if remaining:
        parts.append(f"writes kept arriving: after {passes} passes these rows remain: "
                     + ", ".join(f"{t}={n}" for t, n in sorted(remaining.items()))
                     + "; erase again once the agents serving this customer are stopped")
    if undecided:
        parts.append("residue threads nobody decided on (not erased): " + ", ".join(undecided))
    if parts:
        return "incomplete", "; ".join(parts)
    if exclusions:
        return "complete", "complete with exclusions left by the DPO: " + "; ".join(
            f"{e['thread_id']} ({e['reason']})" for e in exclusions)
    return "complete", None


def _record_stop(db: Database, conn: psycopg.Connection, request_id: int, exc: BaseException, passes: int,
                 threads: set[str], deleted: dict[str, int], evidence: list[EvidenceQuery], targets: list[OwnTarget],
                 customer_id: str, config: subj.Attribution) -> None:
    """Record a failed or interrupted request with what it deleted and, if the database answers, what remains."""
    status = "failed" if isinstance(exc, Exception) else "interrupted"
    params = {"id": request_id, "status": status, "passes": passes, "threads": sorted(threads),
              "deleted": Jsonb(deleted), "after": None, "evidence": Jsonb([asdict(e) for e in evidence]),
              "report": f"{status}: {type(exc).__name__}: {exc}".rstrip(": ")
              + "; resume it from the register page"}
    for attempt in (conn, None):
        try:
            if attempt is None:
                with db.connection() as fresh:
                    _finish_stopped(fresh, params, targets, customer_id, threads, config)
            else:
                _finish_stopped(attempt, params, targets, customer_id, threads, config)
            log.error("erasure %s of %s %s after %s pass(es): %s", request_id, customer_id, status, passes, exc)
            return
        except psycopg.Error as err:
            log.warning("recording the %s erasure %s failed (%s), retrying on a fresh connection", status,
                        request_id, err)
    log.error("erasure %s of %s %s and could not be recorded: it stays 'running' until resumed", request_id,
              customer_id, status)


def _finish_stopped(conn: psycopg.Connection, params: dict, targets: list[OwnTarget], customer_id: str,
                    threads: set[str], config: subj.Attribution) -> None:
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        conn.rollback()
    after = {e.table: e.result for e in _run_evidence(conn, targets, customer_id, threads, config.metadata_keys)}
    conn.execute(FINISH_REQUEST, params | {"after": Jsonb(after)})


def stuck_requests(db: Database) -> list[int]:
    """Requests still `running` whose erasure holds no lock: the process that ran them is gone."""
    stuck = []
    with db.connection() as conn:
        for row in conn.execute(SELECT_RUNNING).fetchall():
            if conn.execute(TRY_LOCK, (ERASURE_LOCK_NS, row["customer_id"])).fetchone()["got"]:
                conn.execute(UNLOCK, (ERASURE_LOCK_NS, row["customer_id"]))
                stuck.append(int(row["id"]))
    return stuck


def resume(db: Database, request_id: int, *, operator: str, decisions: Mapping[str, Any] | None = None,
           config: subj.Attribution | None = None, progress: ProgressFn | None = None) -> ErasureResult:
    """Run a failed, interrupted or stuck request again as a new request (same customer, the residue decisions
    recorded on it unless `decisions` overrides them) and link the old row to it (`resumed_by`).
    Raises ErasureError if the request is unknown, finished normally, or still running elsewhere."""
    row = db.fetch_one(SELECT_REQUEST, (request_id,), read_only=False)
    if row is None:
        raise ErasureError(f"no erasure request {request_id}")
    if row["status"] not in ("failed", "interrupted", "running"):
        raise ErasureError(f"request {request_id} is {row['status']}: nothing to resume")
    if row["status"] == "running" and request_id not in stuck_requests(db):
        raise ErasureError(f"request {request_id} is still running")
    recorded = {r["thread_id"]: Decision(r["decision"], r.get("reason") or "")
                for r in (row["residue"] or []) if r.get("decision") in (ERASE, LEAVE)}
    result = erase(db, row["customer_id"], operator=operator, decisions=recorded | dict(decisions or {}),
                   config=config, progress=progress)
    db.execute(MARK_RESUMED, (result.request_id, request_id))
    return result


# --- re-check -------------------------------------------------------------------------------------


def recheck(db: Database, request_id: int, *, trigger: str = "manual", operator: str | None = None,
            config: subj.Attribution | None = None) -> RecheckResult:
    """Run the evidence queries of request `request_id` again (its threads and any the resolver finds now,
    plus the residue scan with the terms read before the erasure, threads the DPO left excepted) and record
    the result in `core_erasure_rechecks`. `clean` is False when data came back. Raises ErasureError
    for an unknown request."""
    row = db.fetch_one(SELECT_REQUEST, (request_id,), read_only=False)
    if row is None:
        raise ErasureError(f"no erasure request {request_id}")
    customer_id = row["customer_id"]
    config = _config(config)
    terms = [subj.Term(t["term"], t["kind"], int(t["customers"]), int(t.get("threads", 0)))
             for t in (row.get("residue_terms") or []) if not t.get("common")]
    left = [e["thread_id"] for e in (row.get("exclusions") or [])]
    with db.connection() as conn:
        threads = set(row["thread_ids"] or ()) | set(_find_threads(conn, customer_id, config))
        evidence = _run_evidence(conn, own_targets(conn), customer_id, threads, config.metadata_keys, terms, left)
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
    (UTC), `came_back` (the last re-check found data again), `exclusions` (residue threads the DPO left)
    and `resumable` (failed, interrupted or stuck, and not resumed yet). Counts are totals over the tables."""
    rows = db.fetch(SELECT_REGISTER, (limit,), read_only=False)
    frame = pd.DataFrame(rows, columns=[
        "id", "customer_id", "operator", "status", "requested_at", "finished_at", "exclusions", "resumed_by",
        "seconds_to_zero", "passes",
        "counts_before", "deleted", "counts_after", "report", "last_recheck_at", "last_recheck_clean", "rechecks",
        "rechecks_dirty"])
    frame["seconds_to_zero"] = frame["seconds_to_zero"].astype(float)
    frame["same_day"] = [
        bool(f is not None and not pd.isna(f) and s == "complete" and f.astimezone(timezone.utc).date()
             == r.astimezone(timezone.utc).date())
        for r, f, s in zip(frame["requested_at"], frame["finished_at"], frame["status"])
    ]
    stuck = set(stuck_requests(db)) if (frame["status"] == "running").any() else set()
    frame["resumable"] = [bool((s in ("failed", "interrupted") or i in stuck) and (r is None or pd.isna(r)))
                          for i, s, r in zip(frame["id"], frame["status"], frame["resumed_by"])]
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
    "Decision", "erase", "erase_demo_customer", "resume", "stuck_requests", "evidence_document", "evidence_json", "find_threads", "preview", "recheck",
    "recheck_all", "register", "rechecks", "run_evidence",
]
