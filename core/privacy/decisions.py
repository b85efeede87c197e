"""The DPO's decision for each residue thread (core/privacy/residue.py finds them): erase it, or leave it with a
reason that goes into the register. Validated before an erasure touches anything."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.privacy import residue as res

ERASE, LEAVE = "erase", "leave"
NOT_SCANNED = "(not scanned: encrypted, no key opens it)"  # what a residue row names for a thread no key opens


@dataclass(frozen=True)
class Decision:
    """The DPO's choice for one residue thread: erase it, or leave it with a reason."""

    action: str
    reason: str = ""


def validate_decisions(decisions: Mapping[str, Any] | None) -> dict[str, Decision]:
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


def decide(residue: res.Residue, decisions: dict[str, Decision]) -> tuple[list[dict], set[str], list[dict], list[str]]:
    """(residue rows for the register, threads to erase, exclusions, undecided threads)."""
    rows, include, exclusions, undecided = [], set(), [], []
    for thread_id in residue.proposed:
        terms = sorted({m.term for m in residue.matches_of(thread_id)}) or (
            [NOT_SCANNED] if thread_id in residue.not_scanned else []
        )
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


__all__ = ["Decision", "ERASE", "LEAVE", "NOT_SCANNED", "decide", "validate_decisions"]
