"""Requests that follow an earlier one, linked from it (`resumed_by`): `resume` runs a failed, interrupted or stuck
request again; `erase_again` erases again the customer of a complete request whose data came back (the register
page's "Borrar de nuevo"). Both are new requests for the same customer (core/privacy/erasure.py), with the residue
decisions recorded on the old one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.db import Database
from core.privacy import subjects as subj
from core.privacy.decisions import ERASE, LEAVE, Decision
from core.privacy.erasure import SELECT_REQUEST, ErasureError, ErasureResult, ProgressFn, erase, stuck_requests

MARK_RESUMED = "UPDATE core_erasure_register SET resumed_by = %s WHERE id = %s"
SELECT_LATER = """
SELECT id FROM core_erasure_register WHERE customer_id = %s AND (requested_at, id) > (%s, %s)
ORDER BY requested_at, id LIMIT 1"""


def _request(db: Database, request_id: int) -> dict:
    row = db.ours.fetch_one(SELECT_REQUEST, (request_id,), read_only=False)
    if row is None:
        raise ErasureError(f"no erasure request {request_id}")
    return row


def _follow_up(
    db: Database,
    row: dict,
    operator: str,
    decisions: Mapping[str, Any] | None,
    config: subj.Attribution | None,
    progress: ProgressFn | None,
) -> ErasureResult:
    """A new request for the customer of `row` (the residue decisions recorded on it unless `decisions` overrides
    them), linked from the old row (`resumed_by`)."""
    recorded = {
        r["thread_id"]: Decision(r["decision"], r.get("reason") or "")
        for r in (row["residue"] or [])
        if r.get("decision") in (ERASE, LEAVE)
    }
    result = erase(
        db,
        row["customer_id"],
        operator=operator,
        decisions=recorded | dict(decisions or {}),
        config=config,
        progress=progress,
    )
    db.ours.execute(MARK_RESUMED, (result.request_id, row["id"]))
    return result


def resume(
    db: Database,
    request_id: int,
    *,
    operator: str,
    decisions: Mapping[str, Any] | None = None,
    config: subj.Attribution | None = None,
    progress: ProgressFn | None = None,
) -> ErasureResult:
    """Run a failed, interrupted or stuck request again as a new request (same customer, the residue decisions
    recorded on it unless `decisions` overrides them) and link the old row to it (`resumed_by`).
    Raises ErasureError if the request is unknown, finished normally, or still running elsewhere."""
    row = _request(db, request_id)
    if row["status"] not in ("failed", "interrupted", "running"):
        raise ErasureError(f"request {request_id} is {row['status']}: nothing to resume")
    if row["status"] == "running" and request_id not in stuck_requests(db):
        raise ErasureError(f"request {request_id} is still running")
    return _follow_up(db, row, operator, decisions, config, progress)


def erase_again(
    db: Database,
    request_id: int,
    *,
    operator: str,
    decisions: Mapping[str, Any] | None = None,
    config: subj.Attribution | None = None,
    progress: ProgressFn | None = None,
) -> ErasureResult:
    """Erase again the customer of a complete request whose latest re-check found data back: a new request (the residue
    decisions recorded on the old one unless `decisions` overrides them), linked from the old row (`resumed_by`).
    Raises ErasureError if the request is unknown, not complete (see `resume`), its latest re-check found nothing, or
    a later request for the same customer exists (the one re-checks now hold true)."""
    row = _request(db, request_id)
    later = db.ours.fetch_one(SELECT_LATER, (row["customer_id"], row["requested_at"], request_id), read_only=False)
    if later is not None:
        raise ErasureError(f"request {request_id} was followed by request {later['id']} for the same customer")
    if row["status"] != "complete" or row["last_recheck_clean"] is not False:
        raise ErasureError(
            f"request {request_id} is {row['status']} and its latest re-check found "
            f"{'nothing' if row['last_recheck_clean'] is not False else 'data'}: no data came back"
        )
    return _follow_up(db, row, operator, decisions, config, progress)


__all__ = ["erase_again", "resume"]
