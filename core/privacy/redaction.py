"""The register repair of migration 056: erasure requests written before it kept the erased values (residue terms,
the terms matched per residue thread and per exclusion, the residue query with its terms inlined, in the request
and in each of its re-checks). `redact_register` replaces them as today's erasure writes them (keyed hashes,
references; core/privacy/term_hashes.py) and records each redacted sealed row in `core_register_redactions`,
sealed in the erasure chain, so that the chain still verifies and says what was redacted and when
(core/privacy/chain.py). `python -m core.migrate` runs it after the SQL files; it is idempotent (a request is
repaired once, with its re-checks, in one transaction).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import psycopg
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from core.db import one
from core.privacy import chain, term_hashes
from core.privacy import residue as res
from core.privacy.decisions import NOT_SCANNED

log = logging.getLogger(__name__)

REASON = (
    "migration 056: the erasure register kept the erased values; residue terms replaced by keyed hashes, "
    "residue and exclusions name them by reference, evidence keeps the SQL with its terms by reference"
)
# The two array literals RESIDUE_COUNT_SQL had inlined (psycopg's client-side quoting: '...'::text[] or E'...').
INLINED_TERMS = re.compile(r"unnest\(\s*E?'(?:[^']|'')*'::text\[\],\s*E?'(?:[^']|'')*'::text\[\]\)")
UNREADABLE = "-- removed by migration 056: this statement held the erased terms inline, in a form it could not redact"

# Requests written before 056 that kept terms (one without any residue term kept no value: left as it is).
SELECT_LEGACY = """
SELECT r.id FROM core_erasure_register r
WHERE r.term_salt IS NULL
  AND (jsonb_path_exists(coalesce(r.residue_terms, '[]'), '$[*] ? (exists (@.term))')
       OR jsonb_path_exists(coalesce(r.evidence, '[]'), '$[*] ? (@.table == "residue")')
       OR EXISTS (SELECT 1 FROM core_erasure_rechecks k WHERE k.request_id = r.id
                  AND jsonb_path_exists(k.evidence, '$[*] ? (@.table == "residue")')))
ORDER BY r.id"""
SELECT_APPLIED = "SELECT to_regclass('core_register_redactions') IS NOT NULL AS applied"
LOCK_REQUEST = """
SELECT id, residue_terms, residue, exclusions, evidence FROM core_erasure_register
WHERE id = %s AND term_salt IS NULL FOR UPDATE"""
# What the repair left, as text, to check that no value survived it.
SELECT_REPAIRED = """
SELECT concat_ws(' ', r.residue_terms, r.residue, r.exclusions, r.evidence,
                 (SELECT string_agg(k.evidence::text, ' ') FROM core_erasure_rechecks k
                  WHERE k.request_id = r.id)) AS text
FROM core_erasure_register r WHERE r.id = %s"""
SELECT_RECHECKS = "SELECT id, evidence FROM core_erasure_rechecks WHERE request_id = %s ORDER BY id"
UPDATE_REQUEST = """
UPDATE core_erasure_register SET term_salt = %(salt)s, residue_terms = %(residue_terms)s, residue = %(residue)s,
    exclusions = %(exclusions)s, evidence = %(evidence)s
WHERE id = %(id)s"""
UPDATE_RECHECK = "UPDATE core_erasure_rechecks SET evidence = %(evidence)s WHERE id = %(id)s"
INSERT_REDACTION = """
INSERT INTO core_register_redactions (table_name, row_id, fields, sealed_sha256, intact, redacted_sha256, reason)
VALUES (%s, %s, %s, %s, %s, %s, %s)"""


def _redact_evidence(evidence: Any, n_terms: int, values: list[str]) -> Any:
    """Evidence entries with the residue query's inlined terms replaced by references (if a value is still
    there, the statement is removed)."""
    if not isinstance(evidence, list):
        return evidence
    out = []
    refs = f"unnest({res.RESIDUE_TERMS_REF.format(n=n_terms)}, {res.RESIDUE_PATTERNS_REF})"
    for e in evidence:
        if isinstance(e, dict) and e.get("table") == "residue" and isinstance(e.get("sql"), str):
            text = INLINED_TERMS.sub(lambda _m: refs, e["sql"])
            if any(v in text for v in values):
                text = UNREADABLE
            e = {**e, "sql": text}
        out.append(e)
    return out


def _legacy_terms(row: dict) -> list[res.Term]:
    """The terms the row kept verbatim (residue_terms, then any other its residue rows or exclusions name)."""
    terms = [
        res.Term(t["term"], t["kind"], int(t["customers"]), t.get("threads"))
        for t in (row["residue_terms"] or [])
        if "term" in t
    ]
    known = {t.term for t in terms}
    for r in [*(row["residue"] or []), *(row["exclusions"] or [])]:
        for term in r.get("terms") or ():
            if term not in known and term != NOT_SCANNED:
                known.add(term)
                terms.append(res.Term(term, "value", 1, None))
    return terms


def _changed(
    conn: psycopg.Connection[DictRow], table: str, row_id: int, before: tuple[str, str] | None, fields: list[str]
) -> None:
    """Record a sealed row's redaction, sealed in its chain by the table's trigger."""
    if before is None:
        return  # not sealed (a request still running): nothing to prove it against
    sealed, was = before
    _, now = one(chain.sealed_state(conn, table, row_id))  # sealed before its change, so sealed after
    if now != was:
        conn.execute(INSERT_REDACTION, (table, row_id, fields, sealed, was == sealed, now, REASON))


def _jsonb(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)


def _repair(conn: psycopg.Connection[DictRow], row: dict) -> None:
    terms = _legacy_terms(row)
    salt = term_hashes.new_salt()
    hashed = term_hashes.hash_terms(terms, salt)
    refs = {t.term: h.ref for t, h in zip(terms, hashed, strict=True)} | {NOT_SCANNED: NOT_SCANNED}
    n_distinctive = sum(1 for t in terms if not t.common)
    # the values to remove (the id stays where the register needs it)
    values = [t.term for t in terms if t.kind != "id" and len(t.term) >= res.MIN_TERM_LENGTH]
    new = {
        "residue_terms": None if row["residue_terms"] is None else [h.to_json() for h in hashed],
        "residue": None if row["residue"] is None else term_hashes.by_reference(row["residue"], refs),
        "exclusions": None if row["exclusions"] is None else term_hashes.by_reference(row["exclusions"], refs),
        "evidence": _redact_evidence(row["evidence"], n_distinctive, values),
    }
    before = chain.sealed_state(conn, "core_erasure_register", row["id"])
    conn.execute(UPDATE_REQUEST, {"id": row["id"], "salt": salt, **{k: _jsonb(v) for k, v in new.items()}})
    _changed(
        conn, "core_erasure_register", row["id"], before, [k for k, v in new.items() if v != row[k]] + ["term_salt"]
    )
    for check in conn.execute(SELECT_RECHECKS, (row["id"],)).fetchall():
        evidence = _redact_evidence(check["evidence"], n_distinctive, values)
        if evidence == check["evidence"]:
            continue
        before = chain.sealed_state(conn, "core_erasure_rechecks", check["id"])
        conn.execute(UPDATE_RECHECK, {"id": check["id"], "evidence": Jsonb(evidence)})
        _changed(conn, "core_erasure_rechecks", check["id"], before, ["evidence"])
    left = one(conn.execute(SELECT_REPAIRED, (row["id"],)).fetchone())["text"] or ""
    if any(v in left or json.dumps(v, ensure_ascii=False)[1:-1] in left for v in values):
        raise RuntimeError(f"erasure request {row['id']}: the redaction left a value in place (rolled back)")


def redact_register(conn: psycopg.Connection[DictRow]) -> int:
    """Repair every request written before migration 056 (with its re-checks); returns how many. `conn` is an
    autocommit connection with dict rows; each request is repaired in its own transaction."""
    if not one(conn.execute(SELECT_APPLIED).fetchone())["applied"]:
        return 0  # migrated with files before 056 (an older release's core/sql): nothing to repair with yet
    repaired = 0
    for legacy in conn.execute(SELECT_LEGACY).fetchall():
        with conn.transaction():
            row = conn.execute(LOCK_REQUEST, (legacy["id"],)).fetchone()
            if row is None:
                continue  # repaired meanwhile by another migrating process
            _repair(conn, row)
        repaired += 1
    if repaired:
        log.info(
            "erasure register: %d request(s) written before migration 056 redacted (values replaced by "
            "keyed hashes and references; each sealed row's redaction sealed in the chain)",
            repaired,
        )
    return repaired


__all__ = ["REASON", "redact_register"]
