"""Tamper-evident registers: verify the hash chains of core/sql/036_register_chain.sql.

Triggers seal each final register row into `core_register_chain` (the sha256 of the row's canonical
content, the previous link's hash, and the link's own hash). `verify(db, chain)` recomputes all of it
here, in Python, from the rows as they are now, and names the first row that was edited or removed:
- a sealed row edited by SQL: its content no longer hashes to the sealed `content_sha256`;
- a sealed row deleted: its link points at nothing;
- a link edited or deleted: the hashes no longer follow, or a position is missing;
- a final row with no link (inserted around the trigger, or its link deleted at the head).
A sealed row whose values a documented redaction replaced (migration 056: the erasure register kept the erased
values) verifies through its redaction record, sealed in the same chain, and is listed in `redactions`.
What a chain cannot show alone is a truncation of its newest links together with their rows; the
head hash (shown on the register pages and put in every access export) is what to keep elsewhere
to catch that too.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from core.db import Database

CHAINS: dict[str, tuple[str, ...]] = {
    "access": ("core_access_register",),
    "erasure": ("core_erasure_register", "core_erasure_rechecks", "core_register_redactions"),
    "views": ("core_data_views",),  # who looked at a customer's data (migration 085)
}

# The text a link's content_sha256 is the hash of, for the row as it is now (NULL: gone), in the form the link was
# sealed in (migration 053: links sealed by 036's first text record their row's keys); `c` is the link.
LINK_CONTENT = "core_register_link_content(c.table_name, c.row_id, c.sealed_keys)"
# The links of one chain in order, each with its row's content now and the row's redaction record, if any
# (migration 056: values replaced in a sealed row, itself sealed in the chain).
SELECT_LINKS = f"""
SELECT c.position, c.table_name, c.row_id, c.content_sha256, c.prev_hash, c.row_hash, c.sealed_at,
       {LINK_CONTENT} AS content, d.id AS redaction_id, d.fields AS redacted_fields, d.sealed_sha256 AS redacted_from,
       d.intact AS redacted_intact, d.redacted_sha256, d.redacted_at, d.reason AS redaction_reason
FROM core_register_chain c
LEFT JOIN core_register_redactions d ON d.table_name = c.table_name AND d.row_id = c.row_id
WHERE c.chain = %(chain)s ORDER BY c.position"""
# The chain's last retention cut (migration 085): its links up to `position` went with their rows.
SELECT_CUT = """
SELECT position, row_hash, cut_at FROM core_register_cuts WHERE chain = %(chain)s ORDER BY position DESC LIMIT 1"""
# One sealed row: the hash its link holds, and its content now (a redaction records both around its change).
SELECT_SEALED = f"""
SELECT c.content_sha256, {LINK_CONTENT} AS content FROM core_register_chain c
WHERE c.table_name = %(table)s AND c.row_id = %(row_id)s"""
# Rows that should be sealed (final) but have no link.
SELECT_UNSEALED = {
    "core_access_register": "SELECT id FROM core_access_register r WHERE NOT EXISTS ("
    "SELECT 1 FROM core_register_chain c WHERE c.table_name = 'core_access_register' "
    "AND c.row_id = r.id) ORDER BY id",
    "core_erasure_register": "SELECT id FROM core_erasure_register r WHERE status <> 'running' AND NOT EXISTS ("
    "SELECT 1 FROM core_register_chain c WHERE c.table_name = 'core_erasure_register' "
    "AND c.row_id = r.id) ORDER BY id",
    "core_erasure_rechecks": "SELECT id FROM core_erasure_rechecks r WHERE NOT EXISTS ("
    "SELECT 1 FROM core_register_chain c WHERE c.table_name = 'core_erasure_rechecks' "
    "AND c.row_id = r.id) ORDER BY id",
    "core_register_redactions": "SELECT id FROM core_register_redactions r WHERE NOT EXISTS ("
    "SELECT 1 FROM core_register_chain c WHERE c.table_name = 'core_register_redactions' "
    "AND c.row_id = r.id) ORDER BY id",
    "core_data_views": "SELECT id FROM core_data_views r WHERE NOT EXISTS ("
    "SELECT 1 FROM core_register_chain c WHERE c.table_name = 'core_data_views' "
    "AND c.row_id = r.id) ORDER BY id",
}


@dataclass(frozen=True)
class Redaction:
    """A sealed row whose values were replaced by a documented redaction (migration 056's repair)."""

    table: str
    row_id: int
    fields: tuple[str, ...]
    redacted_at: datetime
    reason: str


@dataclass(frozen=True)
class Verification:
    """The outcome of one chain's verification. `ok` False names the first broken row: `table`, `row_id`
    and `problem` (edited / removed / link_edited / link_removed / unsealed); `detail` says it in words."""

    chain: str
    ok: bool
    links: int
    head_hash: str
    table: str | None = None
    row_id: int | None = None
    problem: str | None = None
    detail: str | None = None
    redactions: tuple[Redaction, ...] = ()  # sealed rows redacted since, each proven by its own sealed record
    cut_position: int = 0  # links up to here were deleted by retention (the chain verifies from the next one)
    cut_at: datetime | None = None


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def link_hash(prev_hash: str, table: str, row_id: int, content_sha256: str) -> str:
    """The hash of one link, as the sealing trigger computes it."""
    return sha256_hex(f"{prev_hash}|{table}|{row_id}|{content_sha256}")


def verify(db: Database, chain: str) -> Verification:
    """Recompute chain `chain` ('access', 'erasure' or 'views') from the rows as they are now; raise ValueError
    for an unknown chain."""
    if chain not in CHAINS:
        raise ValueError(f"unknown register chain {chain!r}; known: {', '.join(CHAINS)}")
    with db.ours.connection() as conn, conn.transaction():  # the registers live in our database (issue 52)
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # links and rows of one instant
        links = conn.execute(SELECT_LINKS, {"chain": chain}).fetchall()
        cut = conn.execute(SELECT_CUT, {"chain": chain}).fetchone()
        unsealed = {
            table: [r["id"] for r in conn.execute(SELECT_UNSEALED[table]).fetchall()] for table in CHAINS[chain]
        }

    redactions: list[Redaction] = []

    def broken(link_table: str, row_id: int, problem: str, detail: str) -> Verification:
        return Verification(
            chain,
            False,
            len(links),
            links[-1]["row_hash"] if links else "",
            link_table,
            row_id,
            problem,
            detail,
            tuple(redactions),
            first - 1,
            cut_at,
        )

    def redacted(link: dict, now_sha256: str) -> bool:
        """The row changed only by its redaction: a record (sealed itself, checked at its own position) saying
        the row was intact and held the sealed content just before, and that it is now exactly as redacted."""
        return (
            link["redaction_id"] is not None
            and link["redacted_intact"]
            and link["redacted_from"] == link["content_sha256"]
            and link["redacted_sha256"] == now_sha256
        )

    first, prev, cut_at = (cut["position"] + 1, cut["row_hash"], cut["cut_at"]) if cut else (1, "", None)
    for expected_position, link in enumerate(links, start=first):
        table, row_id = link["table_name"], int(link["row_id"])
        if link["position"] != expected_position:
            return broken(
                table,
                row_id,
                "link_removed",
                f"link {expected_position} of the {chain} chain is missing (the next one is "
                f"{table} #{row_id}): a sealed row's link was deleted",
            )
        if link["content"] is None:
            return broken(table, row_id, "removed", f"{table} #{row_id} was sealed and no longer exists")
        now_sha256 = sha256_hex(link["content"])
        if now_sha256 != link["content_sha256"]:
            if not redacted(link, now_sha256):
                return broken(table, row_id, "edited", f"{table} #{row_id} was changed after it was sealed")
            redactions.append(
                Redaction(table, row_id, tuple(link["redacted_fields"]), link["redacted_at"], link["redaction_reason"])
            )
        if link["prev_hash"] != prev or link_hash(prev, table, row_id, link["content_sha256"]) != link["row_hash"]:
            return broken(table, row_id, "link_edited", f"the chain link of {table} #{row_id} was altered")
        prev = link["row_hash"]
    for table, ids in unsealed.items():
        if ids:
            return broken(
                table,
                ids[0],
                "unsealed",
                f"{table} #{ids[0]} is final but not in the chain (written around the seal, or its link deleted)",
            )
    return Verification(
        chain, True, len(links), prev, redactions=tuple(redactions), cut_position=first - 1, cut_at=cut_at
    )


def sealed_state(conn, table: str, row_id: int) -> tuple[str, str] | None:
    """(the content hash a sealed row's link holds, the row's content hash now), or None for a row not sealed:
    what a redaction records around its change."""
    row = conn.execute(SELECT_SEALED, {"table": table, "row_id": row_id}).fetchone()
    return None if row is None else (row["content_sha256"], sha256_hex(row["content"]))


__all__ = ["CHAINS", "Redaction", "Verification", "link_hash", "sealed_state", "sha256_hex", "verify"]
