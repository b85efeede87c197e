"""The erasure's independent proof: before a request is recorded `complete`, the customer's declared values are looked
for again in every table that can hold them, by a path that shares nothing with the one that found what to erase.

The erasure finds what to delete through the subject resolver, the token index (which narrows the residue scan to
the threads it names) and the change follower's aggregates (value holders, dirty threads). Each of those can be
wrong without knowing it: an index built under another term key, a thread replayed late with old times, a row the
follower could not apply. This proof reads the tables themselves:
- the checkpoint tables, every thread but those the DPO left (with a reason) or nobody decided on: raw bytes of
  every row (`raw_scan.candidates` with no narrowing), each hit confirmed by the SQL decoder as a whole token
  (`residue.token_regex`); encrypted rows opened with the configured keys, a thread no key opens named as unproven;
- the store, every namespace: each document's value text;
- our own tables (`core_*`), every text, JSON or bytea column, the registers included;
- an agent server's own tables where the database holds them (Aegra: thread metadata, runs' input, config, context,
  output and error, run events, those whose run is gone included), every thread but those left: id and values.
In the store and our tables only the values are looked for: the id names other roots' subjects too and our
operational records (tombstones, denials) by design; in the threads the id is looked for as the residue scan does.
The terms are the customer's id and their documents' distinctive values, read before anything was deleted. A value
held by other customers too (common) is not looked for: it is not the customer's to erase.

What it finds is reported as `Proof.found` (where, never the value); a non-empty `found` or `unproven` withholds
`complete`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field

import ahocorasick
import psycopg
from psycopg import sql
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from core.agent_server import aegra
from core.history import formats
from core.privacy import ours as ours_db
from core.privacy import raw_scan, term_hashes
from core.privacy.evidence import AGENTS_COPY
from core.privacy.residue import SELECT_DECODED_THREAD, Term, json_text, token_regex

# Our tables and the columns that can hold a value as text (bytea read as raw bytes).
SELECT_OWN_TEXT_COLUMNS = """
SELECT c.relname AS table_name, array_agg(a.attname::text ORDER BY a.attnum) AS columns,
       array_agg(a.atttypid = 'bytea'::regtype ORDER BY a.attnum) AS raw
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND c.relname LIKE 'core\\_%%'
  AND a.atttypid IN ('text'::regtype, 'varchar'::regtype, 'json'::regtype, 'jsonb'::regtype, 'bytea'::regtype,
                     'text[]'::regtype)
GROUP BY c.relname ORDER BY c.relname"""
SELECT_STORE_ROWS = "SELECT prefix, key, convert_to(value::text, 'UTF8') AS data FROM store"
FETCH_ROWS = 5000
INSERT_PROOF = """
INSERT INTO core_erasure_proofs (request_id, tables, found, unproven, clean, ran_ms)
VALUES (%(id)s, %(tables)s, %(found)s, %(unproven)s, %(clean)s, %(ms)s)"""


@dataclass
class Proof:
    """What the independent re-read found: `found` lists where a term still is (table, and thread or prefix/key or
    `table` for our tables, with the term's reference), `unproven` the threads it could not read."""

    tables: list[str] = field(default_factory=list)  # every relation read
    found: list[dict] = field(default_factory=list)
    unproven: list[str] = field(default_factory=list)
    ran_ms: int = 0

    @property
    def clean(self) -> bool:
        return not self.found and not self.unproven

    def describe(self) -> str:
        """The register's words for it, terms named by reference only."""
        parts = []
        if self.found:
            parts.append(
                "the independent re-read of every table found the customer's values still held: "
                + ", ".join(f"{f['table']} {f['where']} ({f['term']})" for f in self.found[:20])
                + (f" and {len(self.found) - 20} more" if len(self.found) > 20 else "")
            )
        if self.unproven:
            parts.append(
                "threads whose encrypted rows no configured key opens could not be re-read: "
                + ", ".join(self.unproven[:20])
            )
        return "; ".join(parts)


def _automaton(terms: Iterable[str]) -> ahocorasick.Automaton | None:
    automaton = ahocorasick.Automaton()
    for term in set(terms):
        # as written, and as JSON text escapes it (quotes, backslashes, controls)
        for form in {term, json_text(term)} if term else ():
            automaton.add_word(form.encode("utf-8").decode("latin-1"), term)
    if len(automaton) == 0:
        return None
    automaton.make_automaton()
    return automaton


def _stream(conn: psycopg.Connection[DictRow], name: str, query: sql.Composed | str) -> Iterable[DictRow]:
    with conn.cursor(name=name) as cur:
        cur.itersize = FETCH_ROWS
        cur.execute(query)
        yield from cur


def _confirmed(texts: Iterable[str], term: str) -> bool:
    rx = token_regex(term)
    return any(rx.search(text) for text in texts)


def prove(
    conn: psycopg.Connection[DictRow],
    terms: list[Term],
    refs: dict[str, str],
    left: Iterable[str],
    decryptor: formats.Decryptor | None = None,
    carried: tuple[list[term_hashes.HashedTerm], str] = ([], ""),
    ours: psycopg.Connection[DictRow] | None = None,
) -> Proof:
    """Look for the customer's distinctive `terms` (named in the result by `refs[term]`) in every table, outside the
    threads `left`, and for the values earlier requests erased (`carried`: known by their keyed hashes only, with the
    customer's salt) in every document of the store. Reads everything; shares no index or aggregate with the
    erasure. Our tables are read in both databases where the dashboard's is apart (`ours`, or reached from `conn`;
    the agents' database's copy of a table ours has too is named AGENTS_COPY + its name)."""
    started = time.monotonic()
    left = set(left)
    distinctive = [t for t in terms if not t.common]
    earlier = [t for t in carried[0] if not t.common]
    proof = Proof()
    if not distinctive and not earlier:
        return proof
    by_term = {t.term: t for t in distinctive}
    decryptor = decryptor or formats.decryptor()
    # 1. checkpoints: raw bytes of every row of every thread not left, each hit confirmed as a whole token
    proof.tables += list(raw_scan.SCAN_SQL)
    hits: dict[str, set[str]] = {}
    for term, thread_id in raw_scan.candidates(conn, by_term, left):
        hits.setdefault(thread_id, set()).add(term)
    for thread_id in sorted(hits):
        texts = [r["text"] for r in conn.execute(SELECT_DECODED_THREAD, {"thread_id": thread_id}) if r["text"]]
        for term in sorted(hits[thread_id]):
            if _confirmed(texts, term):
                proof.found.append({"table": "checkpoints", "where": f"thread {thread_id}", "term": refs[term]})
    opened, closed = formats.encrypted_texts(conn, decryptor, left)
    for thread_id, texts in sorted(opened.items()):
        for term in sorted(by_term):
            if _confirmed(texts, term):
                proof.found.append({"table": "checkpoints", "where": f"thread {thread_id}", "term": refs[term]})
    proof.unproven = sorted(closed)
    # 2. the store, every namespace (a document under another prefix that holds a value). Here and in our tables the
    # id is not looked for: another root's subject may carry the same id (supplier C2, customer C2), and our
    # operational records (tombstones, denials) name ids by design; the id is the residue scan's in the threads.
    values = _automaton(t.term for t in distinctive if t.kind != "id")
    matcher = term_hashes.Matcher(earlier, carried[1]) if earlier else None
    with conn.transaction():
        proof.tables.append("store")
        for row in _stream(conn, "proof_store", SELECT_STORE_ROWS):
            text = bytes(row["data"]).decode("utf-8")
            where = f"{row['prefix']}/{row['key']}"
            as_bytes = bytes(row["data"]).decode("latin-1")
            for term in sorted({term for _, term in values.iter(as_bytes)} if values else ()):
                if _confirmed([text], term):
                    proof.found.append({"table": "store", "where": where, "term": refs[term]})
            for ref in sorted(matcher.found(text) if matcher else ()):
                proof.found.append({"table": "store", "where": where, "term": ref})
        # 3. an agent server's rows (core.agent_server.aegra): the id too, as in the threads (its rows are threads')
        server = aegra.detect_conn(conn)
        everything = _automaton(by_term) if server is not None else None
        if server is not None and everything is not None:
            proof.tables += [f"{aegra.NAME.lower()}.{t}" for t in ("thread", "runs", "run_events")]
            for row in _stream(conn, "proof_agent_server", aegra.server_texts_sql(server)):
                if row["thread_id"] in left:
                    continue
                text = row["txt"] or ""
                for term in sorted({term for _, term in everything.iter(text.encode("utf-8").decode("latin-1"))}):
                    if _confirmed([text], term):
                        where = f"thread {row['thread_id']}" if row["thread_id"] else "(no thread)"
                        table = f"{aegra.NAME.lower()}.{row['source'].split(' ')[0]}"
                        proof.found.append({"table": table, "where": f"{where}, {row['source']}", "term": refs[term]})
        if values is None:
            proof.ran_ms = round((time.monotonic() - started) * 1000)
            return proof
    # 4. our tables: every text-like column, the registers included (they keep the id, never a value), in our database
    # and, apart, in the agents' (their own logs, and what is left there of ours)
    with nullcontext(ours) if ours is not None else ours_db.connect(conn) as mine:
        apart = ours_db.is_apart(conn, mine)
        ours_tables = _own_tables(mine, values, refs, proof, "") if apart else set()
        _own_tables(conn, values, refs, proof, AGENTS_COPY, ours_tables)
    proof.ran_ms = round((time.monotonic() - started) * 1000)
    return proof


def _own_tables(
    conn: psycopg.Connection[DictRow],
    values: ahocorasick.Automaton,
    refs: dict[str, str],
    proof: Proof,
    copy_label: str,
    copies: set[str] | None = None,
) -> set[str]:
    """Look for `values` in every text-like column of `conn`'s `core_*` tables (one transaction); a table in `copies`
    is named `copy_label` + its name. Returns the tables read."""
    read: set[str] = set()
    with conn.transaction():
        for own in conn.execute(SELECT_OWN_TEXT_COLUMNS).fetchall():
            table = own["table_name"]
            name = copy_label + table if copies and table in copies else table
            read.add(table)
            proof.tables.append(name)
            # text and JSON as their UTF-8 text, bytea as its bytes
            cols = sql.SQL(", ").join(
                sql.Identifier(c) if raw else sql.SQL("convert_to({}::text, 'UTF8')").format(sql.Identifier(c))
                for c, raw in zip(own["columns"], own["raw"], strict=True)
            )
            query = sql.SQL("SELECT {} FROM {}").format(cols, sql.Identifier(table))
            seen: set[str] = set()
            for row in _stream(conn, f"proof_{table}", query):
                data = b"\x1f".join(bytes(v) for v in row.values() if v is not None)
                for _, term in values.iter(data.decode("latin-1")):
                    if term not in seen and _confirmed([data.decode("utf-8", "replace")], term):
                        seen.add(term)
                        proof.found.append({"table": name, "where": "rows", "term": refs[term]})
    return read


def record_proof(conn: psycopg.Connection[DictRow], request_id: int, proof: Proof) -> None:
    conn.execute(
        INSERT_PROOF,
        {
            "id": request_id,
            "tables": proof.tables,
            "found": Jsonb(proof.found),
            "unproven": proof.unproven,
            "clean": proof.clean,
            "ms": proof.ran_ms,
        },
    )


__all__ = ["Proof", "prove", "record_proof"]
