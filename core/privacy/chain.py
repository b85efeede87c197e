"""Tamper-evident registers: verify the hash chains of core/sql/036_register_chain.sql.

Triggers seal each final register row into `core_register_chain` (the sha256 of the row's canonical
content, the previous link's hash, and the link's own hash). `verify(db, chain)` recomputes all of it
here, in Python, from the rows as they are now, and names the first row that was edited or removed:
- a sealed row edited by SQL: its content no longer hashes to the sealed `content_sha256`;
- a sealed row deleted: its link points at nothing;
- a link edited or deleted: the hashes no longer follow, or a position is missing;
- a final row with no link (inserted around the trigger, or its link deleted at the head).
What a chain cannot show alone is a truncation of its newest links together with their rows; the
head hash (shown on the register pages and put in every access export) is what to keep elsewhere
to catch that too.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from core.db import Database

CHAINS: dict[str, tuple[str, ...]] = {
    "access": ("core_access_register",),
    "erasure": ("core_erasure_register", "core_erasure_rechecks"),
}

# The links of one chain in order, each with its row's canonical content as it is now (NULL: gone), in the
# form the link was sealed in (migration 053: links sealed by 036's first text record their row's keys).
SELECT_LINKS = """
SELECT position, table_name, row_id, content_sha256, prev_hash, row_hash, sealed_at,
       core_register_link_content(table_name, row_id, sealed_keys) AS content
FROM core_register_chain WHERE chain = %(chain)s ORDER BY position"""
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
}


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


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def link_hash(prev_hash: str, table: str, row_id: int, content_sha256: str) -> str:
    """The hash of one link, as the sealing trigger computes it."""
    return sha256_hex(f"{prev_hash}|{table}|{row_id}|{content_sha256}")


def verify(db: Database, chain: str) -> Verification:
    """Recompute chain `chain` ('access' or 'erasure') from the rows as they are now; raise ValueError
    for an unknown chain."""
    if chain not in CHAINS:
        raise ValueError(f"unknown register chain {chain!r}; known: {', '.join(CHAINS)}")
    with db.connection() as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # links and rows of one instant
        links = conn.execute(SELECT_LINKS, {"chain": chain}).fetchall()
        unsealed = {table: [r["id"] for r in conn.execute(SELECT_UNSEALED[table]).fetchall()]
                    for table in CHAINS[chain]}

    def broken(link_table: str, row_id: int, problem: str, detail: str) -> Verification:
        return Verification(chain, False, len(links), links[-1]["row_hash"] if links else "", link_table, row_id,
                            problem, detail)

    prev = ""
    for expected_position, link in enumerate(links, start=1):
        table, row_id = link["table_name"], int(link["row_id"])
        if link["position"] != expected_position:
            return broken(table, row_id, "link_removed",
                          f"link {expected_position} of the {chain} chain is missing (the next one is "
                          f"{table} #{row_id}): a sealed row's link was deleted")
        if link["content"] is None:
            return broken(table, row_id, "removed", f"{table} #{row_id} was sealed and no longer exists")
        if sha256_hex(link["content"]) != link["content_sha256"]:
            return broken(table, row_id, "edited", f"{table} #{row_id} was changed after it was sealed")
        if link["prev_hash"] != prev or link_hash(prev, table, row_id, link["content_sha256"]) != link["row_hash"]:
            return broken(table, row_id, "link_edited", f"the chain link of {table} #{row_id} was altered")
        prev = link["row_hash"]
    for table, ids in unsealed.items():
        if ids:
            return broken(table, ids[0], "unsealed",
                          f"{table} #{ids[0]} is final but not in the chain (written around the seal, or its "
                          f"link deleted)")
    return Verification(chain, True, len(links), prev)


__all__ = ["CHAINS", "Verification", "link_hash", "sha256_hex", "verify"]
