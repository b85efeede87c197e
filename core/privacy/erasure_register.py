"""After an erasure: re-checks (the evidence queries run again, recorded in `core_erasure_rechecks`) and
the register as the pages and the DPO's evidence download read it."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import pandas as pd
from psycopg.types.json import Jsonb

from agent_memory_runtime import clock
from core import read_replica
from core.capture.status import sync as capture_sync
from core.db import Database, one
from core.ids import CustomerId
from core.privacy import ours as ours_db
from core.privacy import subjects as subj
from core.privacy import term_hashes
from core.privacy.erasure import SELECT_REQUEST, ErasureError, stuck_requests
from core.privacy.evidence import EvidenceQuery, find_threads_conn, now_iso, own_targets, run_evidence_conn

log = logging.getLogger(__name__)

INSERT_RECHECK = """
INSERT INTO core_erasure_rechecks (request_id, trigger, operator, clean, counts, evidence, checked_at)
VALUES (%s, %s, %s, %s, %s, %s, now() + %s::interval) RETURNING id, checked_at"""
UPDATE_LAST_RECHECK = "UPDATE core_erasure_register SET last_recheck_at = %s, last_recheck_clean = %s WHERE id = %s"
# The latest finished request per customer: what a re-check has to hold true.
SELECT_RECHECKABLE = """
SELECT DISTINCT ON (customer_id) id FROM core_erasure_register
WHERE status IN ('complete', 'incomplete', 'failed', 'interrupted', 'running')
ORDER BY customer_id, requested_at DESC, id DESC"""
# A request with data back: complete, its last re-check found the customer's data, and no later request for the
# customer has followed it (the one re-checks now hold true). What the register shows first and the exporter's
# alert counts (core/operations/exporter.py, agent_memory_erasure_data_back_requests); `r` is the request.
DATA_BACK_OPEN = """
r.status = 'complete' AND r.last_recheck_clean IS FALSE
AND NOT EXISTS (SELECT 1 FROM core_erasure_register n WHERE n.customer_id = r.customer_id
                AND (n.requested_at, n.id) > (r.requested_at, r.id))"""
SELECT_REGISTER = (
    """
SELECT r.id, r.customer_id, r.operator, r.status, r.requested_at, r.finished_at,
       jsonb_array_length(coalesce(r.exclusions, '[]')) AS exclusions, r.resumed_by,
       extract(epoch FROM r.finished_at - r.requested_at) AS seconds_to_zero,
       r.passes, r.counts_before, r.deleted, r.counts_after, r.report,
       r.last_recheck_at, r.last_recheck_clean,
       (SELECT count(*) FROM core_erasure_rechecks k WHERE k.request_id = r.id) AS rechecks,
       (SELECT count(*) FROM core_erasure_rechecks k WHERE k.request_id = r.id AND NOT k.clean) AS rechecks_dirty,
       ("""
    + DATA_BACK_OPEN
    + """) AS data_back
FROM core_erasure_register r ORDER BY r.requested_at DESC, r.id DESC LIMIT %s"""
)
DATA_BACK = "data_back"  # the `outcome` of a request whose data came back and that nothing has followed yet
ERASED_AGAIN = "data_back_erased_again"  # ... and once a later request for the customer followed it
SELECT_RECHECKS = """
SELECT id, request_id, checked_at, trigger, operator, clean, counts, evidence
FROM core_erasure_rechecks WHERE request_id = %s ORDER BY checked_at DESC, id DESC"""


@dataclass(frozen=True)
class RecheckResult:
    request_id: int
    customer_id: str
    clean: bool
    counts: dict[str, int]
    evidence: list[EvidenceQuery]
    checked_at: datetime
    trigger: str


# --- re-check -------------------------------------------------------------------------------------


def recheck(
    db: Database,
    request_id: int,
    *,
    trigger: str = "manual",
    operator: str | None = None,
    config: subj.Attribution | None = None,
) -> RecheckResult:
    """Run the evidence queries of request `request_id` again (its threads and any the resolver finds now,
    plus the residue scan with the terms read before the erasure, threads the DPO left excepted) and record
    the result in `core_erasure_rechecks`. `clean` is False when data came back. Raises ErasureError
    for an unknown request."""
    row = db.ours.fetch_one(SELECT_REQUEST, (request_id,), read_only=False)
    if row is None:
        raise ErasureError(f"no erasure request {request_id}")
    customer_id = CustomerId.parse(row["customer_id"])  # the one check of the id read back from the register
    config = config or subj.Attribution.from_settings()
    try:
        terms = [term_hashes.HashedTerm.from_json(t) for t in (row.get("residue_terms") or [])]
    except ValueError as exc:
        raise ErasureError(f"erasure request {request_id}: {exc}") from exc
    left = [e["thread_id"] for e in (row.get("exclusions") or [])]
    capture_sync(db)  # the token index's dirty threads the residue scan reads include every write until now
    with db.connection() as conn, ours_db.connect(conn) as mine:
        threads = set(row["thread_ids"] or ()) | set(find_threads_conn(conn, customer_id, config))
        # the residue through the terms' hashes: the register keeps no value
        evidence = run_evidence_conn(
            conn,
            own_targets(conn, mine),
            customer_id,
            threads,
            config.metadata_keys,
            left=left,
            hashed=(terms, row["term_salt"]),
            ours=mine,
        )
    # on a replicated setup: the replica has replayed past the primary's WAL after this evidence
    evidence += [EvidenceQuery(*row) for row in read_replica.replay_evidence(db)]
    counts = {e.table: e.result for e in evidence}
    clean = all(n == 0 for n in counts.values())
    rec = one(
        db.ours.fetch_one(
            INSERT_RECHECK,
            (request_id, trigger, operator, clean, Jsonb(counts), Jsonb([asdict(e) for e in evidence]), clock.shift()),
            read_only=False,
        )
    )
    db.ours.execute(UPDATE_LAST_RECHECK, (rec["checked_at"], clean, request_id))
    if not clean:
        log.warning(
            "erasure %s of %s: data came back: %s", request_id, customer_id, {t: n for t, n in counts.items() if n}
        )
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
    ids = [r["id"] for r in db.ours.fetch(SELECT_RECHECKABLE, read_only=False)]
    return RecheckSummary(recheck(db, request_id, trigger=trigger, operator=operator) for request_id in ids)


# --- reading the register -------------------------------------------------------------------------


def register(db: Database, limit: int = 500) -> pd.DataFrame:
    """The latest `limit` requests with time to zero, whether it reached zero the same day (UTC), `came_back`
    (the last re-check found data again), `exclusions` (residue threads the DPO left), `resumable` (failed,
    interrupted or stuck, and not resumed yet) and `outcome`: the status, but for a complete request whose last
    re-check found data: `data_back` while no later request followed it (DATA_BACK_OPEN; to erase again:
    `follow_up.erase_again`), then `data_back_erased_again`. Open `data_back` requests come first, then the rest
    newest first. Counts are totals over the tables."""
    rows = db.ours.fetch(SELECT_REGISTER, (limit,), read_only=False)
    frame = pd.DataFrame(
        rows,
        columns=[
            "id",
            "customer_id",
            "operator",
            "status",
            "requested_at",
            "finished_at",
            "exclusions",
            "resumed_by",
            "seconds_to_zero",
            "passes",
            "counts_before",
            "deleted",
            "counts_after",
            "report",
            "last_recheck_at",
            "last_recheck_clean",
            "rechecks",
            "rechecks_dirty",
            "data_back",
        ],
    )
    frame["seconds_to_zero"] = frame["seconds_to_zero"].astype(float)
    frame["same_day"] = [
        bool(
            f is not None
            and not pd.isna(f)
            and s == "complete"
            and f.astimezone(UTC).date() == r.astimezone(UTC).date()
        )
        for r, f, s in zip(frame["requested_at"], frame["finished_at"], frame["status"], strict=True)
    ]
    stuck = set(stuck_requests(db)) if (frame["status"] == "running").any() else set()
    frame["resumable"] = [
        bool((s in ("failed", "interrupted") or i in stuck) and (r is None or pd.isna(r)))
        for i, s, r in zip(frame["id"], frame["status"], frame["resumed_by"], strict=True)
    ]
    frame["came_back"] = [v is not None and not pd.isna(v) and not bool(v) for v in frame["last_recheck_clean"]]
    frame["outcome"] = [
        DATA_BACK if bool(open_) else ERASED_AGAIN if back and status == "complete" else status
        for open_, back, status in zip(frame["data_back"], frame["came_back"], frame["status"], strict=True)
    ]
    for col in ("counts_before", "deleted", "counts_after"):
        frame[col] = frame[col].map(lambda d: sum(d.values()) if isinstance(d, dict) else None)
    frame = frame.drop(columns=["data_back"])
    return frame.sort_values("outcome", key=lambda o: o != DATA_BACK, kind="stable").reset_index(drop=True)


def rechecks(db: Database, request_id: int) -> pd.DataFrame:
    """Every re-check of one request, newest first (counts and evidence as recorded)."""
    rows = db.ours.fetch(SELECT_RECHECKS, (request_id,), read_only=False)
    return pd.DataFrame(
        rows, columns=["id", "request_id", "checked_at", "trigger", "operator", "clean", "counts", "evidence"]
    )


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def evidence_document(db: Database, request_id: int) -> dict[str, Any]:
    """The request as recorded, with its re-checks and its physical record (core.privacy.physical): what the DPO
    downloads as evidence."""
    row = db.ours.fetch_one(SELECT_REQUEST, (request_id,), read_only=False)
    if row is None:
        raise ErasureError(f"no erasure request {request_id}")
    checks = db.ours.fetch(SELECT_RECHECKS, (request_id,), read_only=False)
    from core.privacy import physical  # imported when used: numpy

    settled = physical.record(db, request_id)
    doc = {
        "kind": "agent-memory erasure evidence",
        "generated_at": now_iso(),
        "request": dict(row),
        "rechecks": [dict(c) for c in checks],
        # after SQL zero: the steps the sweep ran (VACUUM, CHECKPOINT; dead tuples and last vacuum as PostgreSQL
        # reports them), what a read of the files found (term references, never values), the three times
        "physical": dict(settled)
        if settled
        else {"files_status": physical.NOT_MEASURED, "files_note": "no sweep has settled this request yet"},
    }
    return json.loads(json.dumps(doc, default=_json_default))


def evidence_json(db: Database, request_id: int) -> str:
    return json.dumps(evidence_document(db, request_id), ensure_ascii=False, indent=2)


# What a store manager may read of the register (issue 54): that an id was erased, when, and the request's number;
# never who asked, the counts or the evidence (the DPO's register page has those).
SELECT_ERASED = """
SELECT id AS request_id, finished_at AS erased_at FROM core_erasure_register
WHERE customer_id = %(customer_id)s AND status = 'complete' AND finished_at IS NOT NULL
ORDER BY finished_at DESC, id DESC LIMIT 1"""


@dataclass(frozen=True)
class Erased:
    """The latest complete erasure of a customer id, as a manager may read it."""

    request_id: int
    erased_at: datetime


def erased(db: Database, customer_id: str) -> Erased | None:
    """The latest complete erasure of `customer_id` (its request number and when it finished), None when it was
    never erased. Only those two: who asked and what was deleted stay the DPO's."""
    row = db.ours.fetch_one(SELECT_ERASED, {"customer_id": CustomerId.parse(customer_id)})
    return None if row is None else Erased(int(row["request_id"]), row["erased_at"])


__all__ = [
    "DATA_BACK",
    "DATA_BACK_OPEN",
    "ERASED_AGAIN",
    "Erased",
    "RecheckResult",
    "RecheckSummary",
    "erased",
    "evidence_document",
    "evidence_json",
    "recheck",
    "recheck_all",
    "rechecks",
    "register",
]
