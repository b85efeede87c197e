"""Erasure of one customer: everything the agents' memory holds about them, with evidence.

What is deleted, in each pass, until a pass ends with every evidence query at zero:
1. the store: the keys under the prefix `("clientes", id)` (nested namespaces included, expired
   rows included), listed page by page until nothing is left, each page deleted with one
   `store.batch([PutOp(ns, key, None), ...])`; `store_vectors` rows go with them (ON DELETE CASCADE);
2. the customer's checkpoint threads, each with the checkpointer's `delete_thread`: the threads the subject
   resolver attributes (core/privacy/subjects.py: metadata keys, thread-id patterns, `hilo` links read
   before the documents go, our conversation log, earlier requests, the configured query), plus the
   residue threads the DPO chose to include. A residue thread the DPO leaves needs a reason; it is named
   in the register and the evidence (status `complete` with exclusions). One nobody decided on makes the
   request `incomplete`. Every erased thread gets a row in `core_thread_tombstones` first, so a degraded
   replica does not bring it back;
3. on a deployment served by Aegra (core/agent_server/aegra.py, detected by its migrations' tables), its own rows
   about the customer's threads (run events, runs with their input, config, context, output and error, thread
   rows), and runs naming the customer in their context or config on any thread; their zero-count queries are
   shown beside the store's two (run events counted by the run ids captured before the runs were deleted);
4. our own tables that name the customer: every `core_*` table with a `prefix`, `thread_id`,
   `subject_root`+`subject_id` or `cliente_id` column (the memory-write log, conversations, guard
   denials once that table exists, ...), except the erasure register itself.
   The log of who looked at the customer's data stays (a proof), with the purposes typed for those views
   redacted (migration 088: each redaction recorded, the chains still verify).
Writes that arrive meanwhile (a live agent) are caught by the next pass; after MAX_PASSES the
request is recorded as incomplete with the counts still found.

Across two databases (issue 52: the dashboard's own, PG_DASHBOARD, apart from the agents'), the order is the
protocol, each statement committed on its own: (1) in ours, the customer's lock; ours unreachable, nothing starts;
(2) in ours, the register row `running` and the file needles: the intent, committed; (3) on the agents' primary, the
tombstones naming the request, then the store's deletes, `delete_thread`, the agents' own tables; in ours, our own
targets; (4) the evidence: the seed's queries and the checkpoint tables' on the agents' primary, our targets in each
database; (5) the agents' WAL position read on their primary, the register row finished and the proof written in
ours. No row of the agents' is deleted without a committed `running` row naming the customer in ours; a crash
between (2) and (5) leaves that row `running` with no lock held, which `stuck_requests` finds and `follow_up` resumes.

The evidence queries are run as literal SQL (parameters bound client-side by psycopg) so the
register keeps exactly the text that ran and its result (core/privacy/evidence.py). `recheck`
(core/privacy/erasure_register.py) runs them again later.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.store.base import PutOp
from langgraph.store.postgres import PostgresStore
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from agent_memory_runtime import clock
from core import read_replica
from core.agent_server import aegra
from core.capture.status import sync as capture_sync
from core.db import Database, describe_dsn, one
from core.ids import CustomerId
from core.privacy import data_views, physical, term_hashes
from core.privacy import ours as ours_db
from core.privacy import residue as res
from core.privacy import subjects as subj
from core.privacy.decisions import NOT_SCANNED, decide, validate_decisions
from core.privacy.evidence import (
    CLIENTE_KEY,
    DERIVED_TABLES,
    ROOT,
    SERVER_TABLE_PREFIX,
    STORE_TABLES,
    EvidenceQuery,
    OwnTarget,
    evidence_params,
    own_targets,
    run_evidence_conn,
    with_earlier_terms,
)
from core.privacy.proof import Proof, prove, record_proof
from core.privacy.token_index import stale_reason

log = logging.getLogger(__name__)

PAGE_SIZE = 1000  # keys per listed page and per delete batch
MAX_PASSES = 5  # rounds of "delete everything, count again" before reporting live writes
VIEWS_FLUSH_S = 2.0  # how long the erasure waits for this process's queued views (core.privacy.data_views)
ERASURE_LOCK_NS = 0x6572  # advisory lock (ns, hashtext(customer)): one erasure of a customer at a time


INSERT_REQUEST = """
INSERT INTO core_erasure_register (customer_id, namespace_prefix, operator, counts_before, thread_ids, sources,
                                   residue, residue_terms, term_salt, exclusions, requested_at)
VALUES (%(customer_id)s, %(prefix)s, %(operator)s, %(before)s, %(threads)s, %(sources)s, %(residue)s, %(terms)s,
        %(salt)s, %(exclusions)s, now() + %(shift)s::interval)
RETURNING id, requested_at"""
FINISH_REQUEST = """
UPDATE core_erasure_register
SET finished_at = now() + %(shift)s::interval, status = %(status)s, passes = %(passes)s, thread_ids = %(threads)s,
    deleted = %(deleted)s, counts_after = %(after)s, evidence = %(evidence)s, report = %(report)s
WHERE id = %(id)s RETURNING finished_at"""
INSERT_TOMBSTONES = """
INSERT INTO core_thread_tombstones (thread_id, request_id)
SELECT unnest(%(threads)s::text[]), %(id)s
ON CONFLICT (thread_id) DO UPDATE SET request_id = EXCLUDED.request_id"""
# A `running` row whose customer lock nobody holds: the process that ran it is gone.
SELECT_RUNNING = "SELECT id, customer_id FROM core_erasure_register WHERE status = 'running' ORDER BY id"
TRY_LOCK = "SELECT pg_try_advisory_lock(%s, hashtext(%s)) AS got"
UNLOCK = "SELECT pg_advisory_unlock(%s, hashtext(%s))"
SELECT_REQUEST = "SELECT * FROM core_erasure_register WHERE id = %s"


def _tombstone(conn: psycopg.Connection[DictRow], threads: list[str], request_id: int) -> set[str]:
    """Tombstone `threads`; returns those whose id is too long for a btree key (a document's `hilo` can be any
    text): none of the agents' checkpoint tables can hold such a thread, so nothing can replay it, and the erasure
    goes on rather than failing on one value. Tried in one statement, then one id at a time when it is refused."""
    try:
        with conn.transaction():
            conn.execute(INSERT_TOMBSTONES, {"threads": threads, "id": request_id})
        return set()
    except psycopg.errors.ProgramLimitExceeded:
        refused = set()
        for thread in threads:
            try:
                with conn.transaction():
                    conn.execute(INSERT_TOMBSTONES, {"threads": [thread], "id": request_id})
            except psycopg.errors.ProgramLimitExceeded:
                refused.add(thread)
        return refused


class ErasureError(RuntimeError):
    """The erasure could not run (e.g. the register row is missing); nothing is hidden."""


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
    proof: Proof | None = None  # the independent re-read (core/privacy/proof.py); None: not reached (not complete)

    @property
    def complete(self) -> bool:
        """Complete: every evidence query 0 and every residue thread erased or left with a reason
        (`exclusions` names those left)."""
        return self.status == "complete"

    @property
    def store_evidence(self) -> list[EvidenceQuery]:
        """The two store queries (store, store_vectors) the DPO shows verbatim."""
        return [e for e in self.evidence if e.table in STORE_TABLES]

    @property
    def server_evidence(self) -> list[EvidenceQuery]:
        """The zero-count queries over an Agent Protocol server's own tables (none where there is no such server)."""
        return [e for e in self.evidence if e.table.startswith(SERVER_TABLE_PREFIX)]


@dataclass(frozen=True)
class Progress:
    """A step of a running erasure, for a progress display: `step` is one of
    counting / store / threads / logs / evidence / done; `deleted` is the running total."""

    step: str
    pass_no: int
    deleted: int = 0
    detail: dict[str, int] = field(default_factory=dict)


ProgressFn = Callable[[Progress], None]


# --- the erasure --------------------------------------------------------------------------------


# A page of the customer's document keys (nested namespaces too), without their values: what `store.search`
# would page through, minus fetching and parsing every document (40-50 ms of a 2,500-document erasure).
SELECT_KEYS_PAGE = r"""
SELECT prefix, key FROM store WHERE prefix = %(prefix)s OR prefix LIKE %(pattern)s ESCAPE '\'
LIMIT %(limit)s"""


def _erase_store(
    conn: psycopg.Connection[DictRow], store: PostgresStore, customer_id: CustomerId, page_size: int
) -> int:
    """Delete every item under the customer's namespace (nested too) through the store's batch: list a page of
    keys, delete it, until a listing is empty (new writes meanwhile are picked up too)."""
    params = evidence_params(customer_id, ()) | {"limit": page_size}
    deleted = 0
    while True:
        rows = conn.execute(SELECT_KEYS_PAGE, params).fetchall()
        if not rows:
            return deleted
        # langgraph joins a namespace with '.' and refuses labels containing one: the split is exact
        store.batch([PutOp(tuple(r["prefix"].split(".")), r["key"], None) for r in rows])
        deleted += len(rows)


def _erase_threads(saver: PostgresSaver, thread_ids: Iterable[str]) -> int:
    n = 0
    for thread_id in thread_ids:
        saver.delete_thread(thread_id)
        n += 1
    return n


def _erase_own(
    conn: psycopg.Connection[DictRow],
    targets: list[OwnTarget],
    customer_id: CustomerId,
    thread_ids: Iterable[str],
    request_id: int,
    server_runs: Iterable[str] = (),
    ours: psycopg.Connection[DictRow] | None = None,
) -> dict[str, int]:
    """Delete (or scrub from JSON arrays, or redact: the purposes typed when viewing the customer) what our tables
    hold about the customer, for erasure request `request_id`; counts per target. `server_runs`: the agent server's
    run ids captured before (their events are deleted by them). Each target runs where it lives: `ours` (our
    database) or `conn` (the agents')."""
    params = evidence_params(customer_id, thread_ids, server_runs) | {"request_id": request_id}
    deleted: dict[str, int] = {}
    for target in targets:
        if target.erase_sql is None:
            continue
        on = ours if target.ours and ours is not None else conn
        if target.erase_sql.startswith("DELETE"):
            deleted[target.name] = on.execute(target.erase_sql, params).rowcount
            continue
        with on.transaction():  # an UPDATE's rowcount counts rows, not the elements it removes
            n = one(on.execute(target.count_sql, params).fetchone())["n"]
            if n:
                on.execute(target.erase_sql, params)
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

    Raises InvalidIdentifier (nothing deleted, nothing recorded) for an unusable id (parsed here, once, unless it
    already is a CustomerId: everything below trusts it), ValueError for
    an empty operator or a residue thread left without a reason. Returns the result with status `complete`
    (every evidence query 0, residue included, and every residue thread erased or left with a reason) or
    `incomplete` (`report` says what remained). A failure midway is recorded as `failed`, an interruption
    (a BaseException such as Streamlit's rerun or stop) as `interrupted`, both with their counts, and re-raised.
    """
    customer_id = CustomerId.parse(customer_id)
    if not isinstance(operator, str) or not operator.strip():
        raise ValueError("operator identity is required for the erasure register")
    if max_passes < 1:
        raise ValueError(f"max_passes must be at least 1, got {max_passes}")
    chosen = validate_decisions(decisions)
    ours = db.ours
    if ours is not db and not (answer := ours.probe()).ok:  # never delete without a record: nothing starts
        raise ErasureError(
            f"erasure of {customer_id} not started, nothing deleted: the dashboard's database {answer.target} "
            f"(PG_DASHBOARD), where its register row is written first, is not reachable: {answer.error}"
        )
    data_views.flush(db, VIEWS_FLUSH_S)  # this process's views of the customer, queued a moment ago, are redacted too
    capture_sync(db)  # the value holders and dirty threads the residue scan trusts include every write until now
    config = config or subj.Attribution.from_settings()
    notify = progress or (lambda _p: None)
    prefix = f"{ROOT}.{customer_id}"
    shift = clock.shift()  # zero, except in the demo replaying a past day (agent_memory_runtime.clock)
    store = PostgresStore(db.pool)  # no TTL config: expired rows are listed (and erased) too
    saver = PostgresSaver(db.pool)

    # One connection holds the lock and runs our own statements; the store and the checkpointer
    # use the pool, exactly as the agents do. `mine`: our database (the same connection unless PG_DASHBOARD is apart).
    with db.connection() as conn, ExitStack() as stack:
        try:
            mine = stack.enter_context(ours_db.connect(conn))
        except ours_db.OursUnreachable as exc:  # never delete without a record
            raise ErasureError(f"erasure of {customer_id} not started, nothing deleted: {exc}") from exc
        # two DPOs erasing the same customer take turns; the second one then finds zero
        mine.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (ERASURE_LOCK_NS, customer_id))
        request_id = None
        try:
            notify(Progress("counting", 0))
            targets = own_targets(conn, mine)
            # read before anything is deleted: the `hilo` links and the document values live in the store
            subjects = subj.resolve_conn(conn, customer_id, config, ours=mine)
            # their documents' values, and what they stated in their own conversations' tool calls (a value a later
            # write overwrote is in no document any more, and may still be held elsewhere)
            terms = res.customer_terms(conn, customer_id, res.stated_values(conn, subjects.threads))
            residue = res.residue_conn(conn, customer_id, subjects.threads, terms, count_common=False)
            # plus what earlier requests erased, known by its hashes: looked for, and carried on
            residue, earlier, hashed, carried = with_earlier_terms(conn, residue, subjects.threads)
            residue_rows, include, exclusions, undecided = decide(residue, chosen)
            left = [e["thread_id"] for e in exclusions] + undecided
            # the register keeps the terms as keyed hashes and names them by reference, never by value
            refs = (
                {t.term: h.ref for t, h in zip(terms, hashed, strict=True)}
                | {h.ref: h.ref for h in carried}
                | {NOT_SCANNED: NOT_SCANNED}
            )
            residue_rows = term_hashes.by_reference(residue_rows, refs)
            exclusions = term_hashes.by_reference(exclusions, refs)
            evidence_terms = [t for t in terms if not t.common]
            sources = {t: list(s) for t, s in subjects.threads.items()} | {t: ["residue"] for t in include}
            threads = set(subjects.threads) | include
            server = aegra.detect_conn(conn)
            server_runs: set[str] = set()  # the agent server's runs erased: their events are counted by these ids

            def capture_runs() -> None:
                if server is not None:
                    params = evidence_params(customer_id, threads)
                    server_runs.update(aegra.run_ids(conn, server, CLIENTE_KEY, params))

            def evidence_now(candidates: list[str] | None = None) -> list[EvidenceQuery]:
                return run_evidence_conn(
                    conn,
                    targets,
                    customer_id,
                    threads,
                    config.metadata_keys,
                    evidence_terms,
                    left,
                    candidates,
                    (carried, earlier.salt),
                    server_runs,
                    ours=mine,
                )

            capture_runs()
            # before: the residue scan above just read every unattributed row for the same terms (nothing is
            # deleted yet), so its raw matches plus the attributed threads are a superset of the candidates
            before = {e.table: e.result for e in evidence_now(sorted(set(residue.raw_threads) | set(subjects.threads)))}
            # what the sweep looks for in the files later (core.privacy.physical), keyed: never the values
            needles = physical.needles_for(prefix, [(refs[t.term], t) for t in evidence_terms], earlier.salt)
            try:  # the intent, committed in ours before anything of the agents' is touched
                with mine.transaction():
                    row = one(
                        mine.execute(
                            INSERT_REQUEST,
                            {
                                "customer_id": customer_id,
                                "prefix": prefix,
                                "operator": operator.strip(),
                                "before": Jsonb(before),
                                "threads": sorted(threads),
                                "sources": Jsonb(sources),
                                "residue": Jsonb(residue_rows),
                                "terms": Jsonb([h.to_json() for h in hashed + carried]),
                                "salt": earlier.salt,
                                "exclusions": Jsonb(exclusions),
                                "shift": shift,
                            },
                        ).fetchone()
                    )
                    mine.execute(physical.INSERT_NEEDLES, {"id": row["id"], "needles": Jsonb(needles)})
            except psycopg.Error as exc:
                raise ErasureError(
                    f"erasure of {customer_id} not started, nothing deleted: its register row could not be written "
                    f"in {describe_dsn(mine.info.dsn)}: {type(exc).__name__}: {str(exc).strip()}"
                ) from exc
            request_id, requested_at = row["id"], row["requested_at"]
            deleted: dict[str, int] = {}
            evidence: list[EvidenceQuery] = []
            found = before  # what the latest count saw: our tables at 0 need no statement
            passes = 0
            unkeyable: set[str] = set()
            try:
                for passes in range(1, max_passes + 1):
                    n = _erase_store(conn, store, customer_id, page_size)
                    _add(deleted, {"store": n})
                    notify(Progress("store", passes, sum(deleted.values()), dict(deleted)))
                    again = subj.resolve_conn(conn, customer_id, config).threads
                    for t in set(again) - threads:
                        sources[t] = list(again[t])
                    threads |= set(again)
                    # tombstones first: a replica that replays its buffer later must not bring them back (the ids an
                    # earlier pass found too long for a key are not tried again)
                    unkeyable |= _tombstone(conn, sorted(threads - unkeyable), request_id)
                    capture_runs()  # this pass's threads' runs, before delete_thread and our deletes
                    _erase_threads(saver, sorted(threads))
                    notify(Progress("threads", passes, sum(deleted.values()), {"threads": len(threads)}))
                    _add(
                        deleted,
                        _erase_own(
                            conn,
                            [t for t in targets if found.get(t.name)],
                            customer_id,
                            threads,
                            request_id,
                            server_runs,
                            ours=mine,
                        ),
                    )
                    notify(Progress("logs", passes, sum(deleted.values()), dict(deleted)))
                    capture_sync(db)  # the aggregates kept from the store (DERIVED_TABLES) see the deletes
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
                if residue.index_stale:  # the register says why the token index was not trusted for some threads
                    note = f"{stale_reason(residue.index_stale)}: the residue scan read those threads on their bytes"
                    report = f"{report}; {note}" if report else note
                if unkeyable:
                    note = (
                        f"{len(unkeyable)} thread id(s) named by the customer's documents are longer than a btree key "
                        "admits: no tombstone for them, and no checkpoint can have them (their primary keys start "
                        "with the thread id)"
                    )
                    report = f"{report}; {note}" if report else note
                unrecognisable = [h.ref for h in carried if h.foreign and not h.common]
                if status == "complete" and unrecognisable:  # what earlier requests erased cannot be looked for
                    note = (
                        f"{len(unrecognisable)} value(s) erased by earlier requests ({', '.join(unrecognisable)}) were "
                        "hashed under another TERM_HASH_KEY (rotated since): no search now recognises them, so their "
                        "absence cannot be shown"
                    )
                    status, report = "incomplete", f"{note}; {report}" if report else note
                proof = None
                if status == "complete":  # the claim needs its own proof (core/privacy/proof.py)
                    proof = prove(conn, terms, refs, left, carried=(carried, earlier.salt), ours=mine)
                    if not proof.clean:
                        status, report = "incomplete", "; ".join(p for p in (proof.describe(), report) if p)
            except BaseException as exc:
                # Streamlit's rerun/stop are BaseExceptions raised from `notify`: the row must not stay `running`
                _record_stop(
                    db, conn, mine, request_id, exc, passes, threads, deleted, evidence, targets, customer_id, config
                )
                raise
            # the agents' WAL position after the deletes, read on their primary (what the sweep's physical step
            # compares with the slots), written in ours with the finished row
            erased_lsn = one(conn.execute(physical.SELECT_WAL_INSERT_LSN).fetchone())["lsn"]
            finished = one(
                mine.execute(
                    FINISH_REQUEST,
                    {
                        "id": request_id,
                        "status": status,
                        "shift": shift,
                        "passes": passes,
                        "threads": sorted(threads),
                        "deleted": Jsonb(deleted),
                        "after": Jsonb(after),
                        "evidence": Jsonb([asdict(e) for e in evidence]),
                        "report": report,
                    },
                ).fetchone()
            )
            mine.execute(physical.SET_ERASED_LSN, {"id": request_id, "lsn": erased_lsn})
            if proof is not None:
                record_proof(mine, request_id, proof)
            notify(Progress("done", passes, sum(deleted.values()), after))
        finally:
            try:
                mine.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (ERASURE_LOCK_NS, customer_id))
            except psycopg.Error:  # a broken connection releases its session locks when it is closed
                log.warning("could not release the erasure lock of request %s", request_id)
    if report:
        (log.info if status == "complete" else log.warning)(
            "erasure %s of %s %s: %s", request_id, customer_id, status, report
        )
    read_replica.wait_replayed(db)  # bounded: the pages that read the replica next see the erasure
    return ErasureResult(
        request_id=request_id,
        customer_id=customer_id,
        namespace_prefix=prefix,
        operator=operator.strip(),
        status=status,
        passes=passes,
        requested_at=requested_at,
        finished_at=finished["finished_at"],
        counts_before=before,
        deleted=deleted,
        counts_after=after,
        evidence=evidence,
        thread_ids=sorted(threads),
        report=report,
        exclusions=exclusions,
        residue=residue_rows,
        sources=sources,
        proof=proof,
    )


def _outcome(
    passes: int, remaining: dict[str, int], undecided: list[str], exclusions: list[dict]
) -> tuple[str, str | None]:
    parts = []
    if remaining:
        parts.append(
            f"writes kept arriving: after {passes} passes these rows remain: "
            + ", ".join(f"{t}={n}" for t, n in sorted(remaining.items()))
            + "; erase again once the agents serving this customer are stopped"
        )
    if undecided:
        parts.append("residue threads nobody decided on (not erased): " + ", ".join(undecided))
    if parts:
        return "incomplete", "; ".join(parts)
    if exclusions:
        return "complete", "complete with exclusions left by the DPO: " + "; ".join(
            f"{e['thread_id']} ({e['reason']})" for e in exclusions
        )
    return "complete", None


def _record_stop(
    db: Database,
    conn: psycopg.Connection[DictRow],
    mine: psycopg.Connection[DictRow],
    request_id: int,
    exc: BaseException,
    passes: int,
    threads: set[str],
    deleted: dict[str, int],
    evidence: list[EvidenceQuery],
    targets: list[OwnTarget],
    customer_id: CustomerId,
    config: subj.Attribution,
) -> None:
    """Record a failed or interrupted request with what it deleted and, if the database answers, what remains."""
    status = "failed" if isinstance(exc, Exception) else "interrupted"
    params = {
        "id": request_id,
        "status": status,
        "shift": clock.shift(),
        "passes": passes,
        "threads": sorted(threads),
        "deleted": Jsonb(deleted),
        "after": None,
        "evidence": Jsonb([asdict(e) for e in evidence]),
        "report": f"{status}: {type(exc).__name__}: {exc}".rstrip(": ") + "; resume it from the register page",
    }
    for attempt in (conn, None):
        try:
            if attempt is None:
                with db.connection() as fresh, ours_db.connect(fresh) as fresh_ours:
                    _finish_stopped(fresh, fresh_ours, params, targets, customer_id, threads, config)
            else:
                _finish_stopped(attempt, mine, params, targets, customer_id, threads, config)
            log.error("erasure %s of %s %s after %s pass(es): %s", request_id, customer_id, status, passes, exc)
            return
        except (psycopg.Error, ours_db.OursUnreachable) as err:
            log.warning(
                "recording the %s erasure %s failed (%s), retrying on a fresh connection", status, request_id, err
            )
    log.error(
        "erasure %s of %s %s and could not be recorded: it stays 'running' until resumed",
        request_id,
        customer_id,
        status,
    )


def _finish_stopped(
    conn: psycopg.Connection[DictRow],
    mine: psycopg.Connection[DictRow],
    params: dict,
    targets: list[OwnTarget],
    customer_id: CustomerId,
    threads: set[str],
    config: subj.Attribution,
) -> None:
    for c in (conn, mine):
        if c.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            c.rollback()
    after = {
        e.table: e.result
        for e in run_evidence_conn(conn, targets, customer_id, threads, config.metadata_keys, ours=mine)
    }
    mine.execute(FINISH_REQUEST, params | {"after": Jsonb(after)})


def stuck_requests(db: Database) -> list[int]:
    """Requests still `running` whose erasure holds no lock: the process that ran them is gone."""
    stuck = []
    with db.ours.connection() as conn:  # the register and the erasure's lock live in our database
        for row in conn.execute(SELECT_RUNNING).fetchall():
            if one(conn.execute(TRY_LOCK, (ERASURE_LOCK_NS, row["customer_id"])).fetchone())["got"]:
                conn.execute(UNLOCK, (ERASURE_LOCK_NS, row["customer_id"]))
                stuck.append(int(row["id"]))
    return stuck


__all__ = ["ErasureError", "ErasureResult", "Progress", "erase", "stuck_requests"]
