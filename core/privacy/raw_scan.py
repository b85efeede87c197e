"""The residue scan's raw-bytes filter: every checkpoint row read once, all the customer's terms matched
at once (Aho-Corasick, `pyahocorasick`).

Semantics are those of `position(convert_to(term, 'UTF8') IN blob) > 0` on `checkpoint_writes.blob` and
`checkpoint_blobs.blob`, and of `strpos((checkpoint -> 'channel_values')::text, term) > 0` on `checkpoints`
(the inline primitive values PostgresSaver keeps there; the rest is versions and channel names): a term matches
where its UTF-8 bytes occur. In SQL that filter costs (rows x terms): a customer with 2,500 documents has
~2,000 distinct values, and the per-term `position` ran for minutes at 100k checkpoint writes. Here each
row is read once whatever the number of terms; bytes are mapped 1:1 to text (latin-1) so that the
automaton, which works on text, matches raw bytes.
"""

from __future__ import annotations

from collections.abc import Iterable

import ahocorasick
import psycopg
from psycopg.rows import DictRow

# Rows whose threads are not excluded (attributed, or left by the DPO); each table read once.
SCAN_SQL = {
    "checkpoint_writes": (
        "SELECT thread_id, blob AS data FROM checkpoint_writes WHERE NOT (thread_id = ANY(%(exclude)s))"
    ),
    "checkpoint_blobs": "SELECT thread_id, blob AS data FROM checkpoint_blobs "
    "WHERE blob IS NOT NULL AND NOT (thread_id = ANY(%(exclude)s))",
    # only the inline channel values: the rest of a checkpoint is versions and channel names, not data
    "checkpoints": "SELECT thread_id, convert_to((checkpoint -> 'channel_values')::text, 'UTF8') AS data "
    "FROM checkpoints WHERE checkpoint -> 'channel_values' <> '{}'::jsonb "
    "AND NOT (thread_id = ANY(%(exclude)s))",
}
FETCH_ROWS = 5000


def _as_text(data: bytes) -> str:
    return bytes(data).decode("latin-1")


ONLY = " AND thread_id = ANY(%(only)s)"


def describe(terms: int, over: str = "every thread", only: bool = False) -> str:
    """What ran, for the evidence and the page (the scan is not one SQL statement)."""
    return f"raw-bytes scan of {terms} terms (Aho-Corasick) over {over}: " + "; ".join(
        f"{sql}{ONLY if only else ''} [exclude = attributed threads]" for sql in SCAN_SQL.values()
    )


def candidates(
    conn: psycopg.Connection[DictRow], terms: Iterable[str], exclude: Iterable[str], only: Iterable[str] | None = None
) -> set[tuple[str, str]]:
    """(term, thread_id) for every term whose bytes occur in a row of a thread not in `exclude`
    (and in `only`, when given: the token index's candidates)."""
    automaton = ahocorasick.Automaton()
    for term in set(terms):
        if term:
            automaton.add_word(_as_text(term.encode("utf-8")), term)
    if len(automaton) == 0:
        return set()
    automaton.make_automaton()
    found: set[tuple[str, str]] = set()
    params = {"exclude": sorted(set(exclude)), "only": None if only is None else sorted(set(only))}
    if params["only"] == []:
        return found
    with conn.transaction():  # a server-side cursor streams the rows (autocommit pools included)
        for table, query in SCAN_SQL.items():
            with conn.cursor(name=f"residue_scan_{table}") as cur:
                cur.itersize = FETCH_ROWS
                cur.execute(query + (ONLY if only is not None else ""), params)
                for row in cur:
                    thread_id, data = (row["thread_id"], row["data"]) if isinstance(row, dict) else row
                    for _, term in automaton.iter(_as_text(data)):
                        found.add((term, thread_id))
    return found
