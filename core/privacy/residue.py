"""The residue scan of an erasure: threads no attribution source gave for a customer, which still hold the
customer id (whole token) or the values of the customer's own store documents. A raw-bytes filter first,
then the SQL decoder confirms and gives a snippet. A value other customers' documents also hold (a store
id like `T002`) is *common*: listed, never proposed. The sources themselves are in `subjects`. On a deployment served
by Aegra, its rows' text (thread metadata, run inputs, configs, contexts, outputs, errors, run events) is read too
(core.agent_server.aegra.SERVER_RESIDUE).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import DictRow

from core.agent_server import aegra
from core.capture.status import sync as capture_sync
from core.db import Database
from core.history import formats
from core.ids import CustomerId
from core.privacy import ours as ours_db
from core.privacy import raw_scan, token_index
from core.privacy.subjects import HILO_KEY, Attribution, Subjects, resolve_conn, subject_params

SNIPPET_CHARS = 60  # characters either side of a residue match
MIN_TERM_LENGTH = 3  # shorter store values ("sí", "1") match everywhere and prove nothing
# A document value held by more customers than this is common: listed with its count, never proposed.
COMMON_CUSTOMERS = 1
COUNT_CAP = 100  # customers holding a term are counted up to this; more is shown as "> 100"
# Store value keys that are never terms: the back-link (a thread id) and the article's closed schema fields
# (`tipo` is one of four words, `origen` is "cliente"): words every conversation may hold, not personal data.
NON_TERM_KEYS = frozenset({HILO_KEY, "tipo", "origen"})

# --- residue scan ----------------------------------------------------------------------------------------

# The customer's own document values (strings, at any depth), except the back-link.
SELECT_DOCUMENT_VALUES = r"""
SELECT DISTINCT v #>> '{}' AS term
FROM store s, jsonb_path_query(s.value - %(skip)s::text[], 'strict $.**') AS p(v)
WHERE (s.prefix = %(prefix)s OR s.prefix LIKE %(prefix_like)s ESCAPE '\')
  AND jsonb_typeof(v) = 'string'"""
# How many customers' documents hold each term (any depth), counted up to COUNT_CAP + 1: an index lookup per
# term in core_value_holders, kept by triggers on `store` (migration 043). (A pass over every customer's
# documents took 16.2 s for one customer's 2,506 values at 10M documents.)
SELECT_TERM_CUSTOMERS = """
SELECT t.term, (SELECT count(*) FROM (SELECT 1 FROM core_value_holders h
                                      WHERE h.value_hash = hashtextextended(t.term, 0) LIMIT %(cap)s) x) AS customers
FROM unnest(%(terms)s::text[]) AS t(term)"""
# Confirmation by the SQL decoder: one thread's decoded pending writes and channel values, as text.
SELECT_DECODED_THREAD = """
SELECT payload::text AS text FROM core_checkpoint_writes_view WHERE thread_id = %(thread_id)s
UNION ALL
SELECT channel_values::text FROM core_checkpoints_view WHERE thread_id = %(thread_id)s"""


# The residue threads, decoder-confirmed in SQL (what an erasure's evidence counts): the candidate threads of the
# raw-bytes scan (`raw_scan.candidates`, run just before), then in
# their rows the raw bytes and the decoded payload must match the term (the id as a whole token).
# The candidates' rows are read first by primary key (joined with the terms directly, the planner chose a
# parallel seq scan of checkpoint_writes and checkpoint_blobs to share the join's cost: 1.1 s at 1M for 2,501
# terms), and each (row, term) pair tests the raw bytes before decoding or compiling the term's regex.
RESIDUE_THREADS_SQL = """
WITH t AS MATERIALIZED (
    SELECT raw, convert_to(raw, 'UTF8') AS raw_bytes, rx FROM unnest(%(raws)s::text[], %(rxs)s::text[]) AS u(raw, rx)
), r AS MATERIALIZED (
    SELECT thread_id, type, blob, NULL::text AS txt FROM checkpoint_writes
    WHERE thread_id = ANY(%(candidates)s) AND NOT (thread_id = ANY(%(left)s))
    UNION ALL
    SELECT thread_id, type, blob, NULL FROM checkpoint_blobs
    WHERE thread_id = ANY(%(candidates)s) AND NOT (thread_id = ANY(%(left)s))
    UNION ALL
    SELECT thread_id, NULL, NULL, (checkpoint -> 'channel_values')::text FROM checkpoints
    WHERE thread_id = ANY(%(candidates)s) AND NOT (thread_id = ANY(%(left)s))
)
SELECT DISTINCT r.thread_id FROM r JOIN t ON
    CASE WHEN r.blob IS NOT NULL THEN
             CASE WHEN position(t.raw_bytes IN r.blob) > 0 THEN core_checkpoint_payload(r.type, r.blob)::text ~ t.rx END
         WHEN r.txt IS NOT NULL THEN CASE WHEN strpos(r.txt, t.raw) > 0 THEN r.txt ~ t.rx END
    END"""
# RESIDUE_THREADS_SQL as the evidence records it: the terms and their patterns named by reference, never inlined
# (our records must not keep what they record the removal of); the threads are inlined as they ran.
RESIDUE_TERMS_REF = (
    ":residue_terms /* the {n} distinctive terms: residue_terms of this request, kept as keyed "
    "hashes (core/privacy/term_hashes.py) */"
)
RESIDUE_PATTERNS_REF = ":residue_term_patterns /* each term as a whole token, escaped (residue.token_regex) */"


def residue_threads_shown(n_terms: int, query: str = RESIDUE_THREADS_SQL) -> str:
    """`query` (RESIDUE_THREADS_SQL, or the agent server's) with its terms replaced by references (to be bound with
    the other parameters)."""
    return query.replace("%(raws)s::text[]", RESIDUE_TERMS_REF.format(n=n_terms)).replace(
        "%(rxs)s::text[]", RESIDUE_PATTERNS_REF
    )


def scan(
    conn: psycopg.Connection[DictRow],
    terms: Iterable[str],
    exclude: Iterable[str],
    narrow_by: Iterable[str] | None = None,
    decryptor: formats.Decryptor | None = None,
) -> tuple[set[tuple[str, str]], str, token_index.Candidates]:
    """(term, thread) pairs whose bytes match, over the threads the token index names for `narrow_by` (default:
    the terms; every thread when it cannot answer), threads in `exclude` excepted; what ran; the candidates."""
    terms = set(terms)
    narrowed = token_index.candidates(conn, terms if narrow_by is None else narrow_by, decryptor)
    pairs = raw_scan.candidates(conn, terms, exclude, only=narrowed.threads)
    return pairs, raw_scan.describe(len(terms), narrowed.describe(), narrowed.threads is not None), narrowed


def _are_escape(text: str) -> str:
    """`text` as a literal in a PostgreSQL regular expression (ARE)."""
    return "".join(ch if ch.isalnum() or ch == " " else "\\" + ch for ch in text)


def residue_count_params(
    conn: psycopg.Connection[DictRow],
    terms: Iterable[Term],
    left: Iterable[str],
    candidates: Iterable[str] | None = None,
) -> dict[str, Any]:
    """Parameters of RESIDUE_THREADS_SQL for these terms (common ones dropped), threads in `left` excepted:
    the raw-bytes scan runs now and gives the candidate threads, unless a scan of the same terms just gave
    them (`candidates`: `Residue.raw_threads` of the same connection and moment)."""
    raws, rxs = [], []
    for t in terms:
        if t.common:
            continue
        raws.append(t.term)
        rxs.append(_bounded(t.term, _are_escape(json_text(t.term))))
    left = sorted(set(left))
    if candidates is None:
        candidates = {thread for _, thread in scan(conn, raws, left)[0]} if raws else set()
    return {"raws": raws, "rxs": rxs, "left": left, "candidates": sorted(set(candidates) - set(left))}


@dataclass(frozen=True)
class Term:
    """One search term: the customer id or a value of the customer's documents."""

    term: str
    kind: str  # id / value
    customers: int  # customers whose documents hold it (1 = only this one; the id counts as 1; > COUNT_CAP: more)
    threads: int | None = 0  # unattributed threads holding it (decoder-confirmed; for a common term: holding all
    # its tokens per the token index, plus unindexed threads whose bytes hold it; raw bytes when every thread is
    # read; None: a common term whose threads were not counted)

    @property
    def common(self) -> bool:
        return self.customers > COMMON_CUSTOMERS


@dataclass(frozen=True)
class ResidueMatch:
    thread_id: str
    term: str
    kind: str
    customers: int
    common: bool
    snippet: str


@dataclass
class Residue:
    """Unattributed threads that hold the customer's id or document values."""

    customer_id: CustomerId
    terms: list[Term]
    matches: list[ResidueMatch]  # one per (thread, term), confirmed by the decoder
    candidates: int  # (term, thread) pairs the raw-bytes filter let through
    sql: str  # what the raw-bytes scan ran (raw_scan.describe)
    common_threads: list[str] = field(default_factory=list)  # threads read whose bytes hold a common term
    raw_threads: list[str] = field(default_factory=list)  # threads a distinctive term's raw bytes were found in
    # unattributed threads holding encrypted rows no configured key opens: the scan could not read them
    not_scanned: list[str] = field(default_factory=list)
    # threads the token index holds under another term hash key (TERM_HASH_KEY rotated, the sweep has not re-indexed
    # them yet): the scan read them on their bytes, as threads not indexed yet (token_index.Candidates.stale)
    index_stale: int = 0

    @property
    def proposed(self) -> list[str]:
        """Threads matched by at least one distinctive (not common) term, and threads the scan could not read
        (`not_scanned`): the DPO decides each one."""
        return sorted({m.thread_id for m in self.matches if not m.common} | set(self.not_scanned))

    @property
    def common_only(self) -> list[str]:
        """Threads where only common terms were found: listed, not proposed."""
        return sorted(set(self.common_threads) - set(self.proposed))

    def matches_of(self, thread_id: str) -> list[ResidueMatch]:
        return [m for m in self.matches if m.thread_id == thread_id]


# Where a term's edge is a token character ([A-Za-z0-9_%]), its match must not continue a token of the text:
# `C9` is not found inside `C9x` or `xC9`, `Centro` not inside `Centros`. The text is the decoder's JSON, so a
# JSON escape (`\nC9`: a newline, then C9) is a boundary too. The same syntax serves Python's `re` and
# PostgreSQL's regular expressions. This makes every token of a matched term a token of the thread's values,
# which is what lets the token index (core.privacy.token_index) narrow the scan without missing a match.
TOKEN_CHAR = re.compile(r"[A-Za-z0-9_%]")
LEADING_BOUNDARY = r"(?:(?<![A-Za-z0-9_%])|(?<=\\[bfnrt])|(?<=\\u[0-9a-fA-F]{4}))"
TRAILING_BOUNDARY = r"(?![A-Za-z0-9_%])"


def _bounded(term: str, body: str) -> str:
    """`body` (the escaped JSON text of `term`) with a boundary at each edge of `term` that is a token character."""
    lead = LEADING_BOUNDARY if term and TOKEN_CHAR.match(term[0]) else ""
    trail = TRAILING_BOUNDARY if term and TOKEN_CHAR.match(term[-1]) else ""
    return lead + body + trail


def token_regex(term: str) -> re.Pattern[str]:
    """How `term` (the id or a document value) is found in the decoder's JSON text of a payload."""
    return re.compile(_bounded(term, re.escape(json_text(term))))


def _snippet(text: str, m: re.Match[str]) -> str:
    start, end = max(0, m.start() - SNIPPET_CHARS), min(len(text), m.end() + SNIPPET_CHARS)
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


def json_text(term: str) -> str:
    """How `term` appears inside JSON text (the decoded payloads), quotes, backslashes and controls escaped as
    PostgreSQL's jsonb output escapes them."""
    import json

    return json.dumps(term, ensure_ascii=False)[1:-1]


# The string arguments of the tool calls the agents made in the customer's own (attributed) threads, where they
# write memory: a value a later write overwrote is no longer in any document, yet a conversation elsewhere (another
# agent's thread, a supplier notice) may still hold it; read from the decoded checkpoints, not from our extraction.
SELECT_STATED_VALUES = r"""
SELECT DISTINCT a.value #>> '{}' AS term
FROM core_checkpoint_messages_view m
CROSS JOIN LATERAL jsonb_array_elements(m.tool_calls) AS c(call)
CROSS JOIN LATERAL jsonb_each(CASE WHEN jsonb_typeof(c.call -> 'args') = 'object' THEN c.call -> 'args'
                                   ELSE '{}'::jsonb END) AS a(key, value)
WHERE m.thread_id = ANY(%(threads)s) AND m.kind = 'ai' AND jsonb_typeof(m.tool_calls) = 'array'
  AND NOT (a.key = ANY(%(skip)s)) AND jsonb_typeof(a.value) = 'string' AND a.value #>> '{}' ~ '[0-9@]'"""


def stated_values(conn: psycopg.Connection[DictRow], threads: Iterable[str]) -> set[str]:
    """The string arguments of every tool call in `threads` (the customer's attributed conversations) that hold a
    digit or an `@` (a phone, an e-mail, a street number), but the closed-schema keys (NON_TERM_KEYS): what the
    customer stated there, overwritten since or not. Words alone are left out: a value no document holds any more is
    counted as held by this customer only, and a word ("catalán") would then propose every conversation that uses it."""
    threads = sorted(set(threads))
    if not threads:
        return set()
    return {r["term"] for r in conn.execute(SELECT_STATED_VALUES, {"threads": threads, "skip": list(NON_TERM_KEYS)})}


def customer_terms(
    conn: psycopg.Connection[DictRow], customer_id: CustomerId, extra_values: Iterable[str] = ()
) -> list[Term]:
    """The id and the distinctive values of the customer's documents, each with its commonness."""
    params = subject_params(customer_id)
    found = {r["term"] for r in conn.execute(SELECT_DOCUMENT_VALUES, {**params, "skip": list(NON_TERM_KEYS)})}
    found |= set(extra_values)
    values = sorted(v for v in found if len(v.strip()) >= MIN_TERM_LENGTH and v != customer_id)
    counts: dict[str, int] = {}
    if values:  # the value holders are the change follower's, in our database (issue 52)
        with ours_db.connect(conn) as mine:
            rows = mine.execute(SELECT_TERM_CUSTOMERS, {"terms": values, "cap": COUNT_CAP + 1}).fetchall()
        counts = {r["term"]: int(r["customers"]) for r in rows}
    terms = [Term(customer_id, "id", 1)]
    terms += [Term(v, "value", max(1, counts.get(v, 0))) for v in values]
    return terms


def residue_conn(
    conn: psycopg.Connection[DictRow],
    customer_id: CustomerId,
    attributed: Iterable[str],
    terms: list[Term] | None = None,
    count_common: bool = True,
    decryptor: formats.Decryptor | None = None,
) -> Residue:
    """The residue of `customer_id` outside the `attributed` threads. Threads are read where the token index
    says a distinctive term may be (common terms never propose a thread); each common term's threads are then
    counted through the index (`count_common=False` skips that, leaving them None: an erasure does not need them,
    and at 10M counting 2,505 common terms took 3.4-7 s of a 6.3 s preview). Encrypted rows are decrypted in
    Python with `decryptor` (default: the configured keys); a thread with rows no key opens is `not_scanned`."""
    attributed = set(attributed)
    decryptor = decryptor or formats.decryptor()
    terms = terms if terms is not None else customer_terms(conn, customer_id, stated_values(conn, attributed))
    by_term = {t.term: t for t in terms}
    pairs, ran, narrowed = scan(
        conn, by_term, attributed, narrow_by=[t.term for t in terms if not t.common], decryptor=decryptor
    )
    threads: dict[str, set[str]] = {}
    for term, thread_id in pairs:
        threads.setdefault(thread_id, set()).add(term)
    # Only distinctive terms are confirmed by the decoder (the expensive part); a common term is listed
    # with the number of threads its raw bytes were found in, and never proposes a thread.
    matches: list[ResidueMatch] = []
    raw_threads: dict[str, set[str]] = {}
    for thread_id, found in threads.items():
        for term in found:
            raw_threads.setdefault(term, set()).add(thread_id)
    for thread_id in sorted(threads):
        distinctive = sorted(t for t in threads[thread_id] if not by_term[t].common)
        if not distinctive:
            continue
        texts = [r["text"] for r in conn.execute(SELECT_DECODED_THREAD, {"thread_id": thread_id}) if r["text"]]
        for term in distinctive:
            t = by_term[term]
            rx = token_regex(term)
            hit = next(((text, m) for text in texts if (m := rx.search(text))), None)
            if hit is not None:
                matches.append(ResidueMatch(thread_id, term, t.kind, t.customers, False, _snippet(*hit)))
    # encrypted rows: the raw bytes hold no term; those of the index's candidates (which name the threads whose
    # encrypted rows the sweep could not read) read in Python with the configured keys, or named as not scanned
    opened, not_scanned = formats.encrypted_texts(conn, decryptor, attributed, only=narrowed.threads)
    distinctive_terms = [t for t in terms if not t.common]
    for thread_id, texts in sorted(opened.items()):
        for t in distinctive_terms:
            rx = token_regex(t.term)
            hit = next(((text, m) for text in texts if (m := rx.search(text))), None)
            if hit is not None and not any(m.thread_id == thread_id and m.term == t.term for m in matches):
                matches.append(ResidueMatch(thread_id, t.term, t.kind, t.customers, False, _snippet(*hit)))
    # an agent server's own rows (Aegra: thread metadata, run inputs, configs, contexts, outputs, errors, run events)
    # of threads nobody attributed: a failed first run has no checkpoint at all, and its input the customer's words
    server = aegra.detect_conn(conn)
    if server is not None and distinctive_terms:
        raws = [t.term for t in distinctive_terms]
        rxs = [_bounded(t.term, _are_escape(json_text(t.term))) for t in distinctive_terms]
        for row in aegra.residue_rows(conn, server, raws, rxs, attributed):
            thread_id, t = row["thread_id"], by_term[row["term"]]
            m = token_regex(t.term).search(row["txt"])
            if m is not None and not any(x.thread_id == thread_id and x.term == t.term for x in matches):
                matches.append(ResidueMatch(thread_id, t.term, t.kind, t.customers, False, _snippet(row["txt"], m)))
    confirmed: dict[str, int] = {}
    for match in matches:
        confirmed[match.term] = confirmed.get(match.term, 0) + 1
    common = [t.term for t in terms if t.common]
    counts: dict[str, int | None]
    if narrowed.threads is not None and not count_common:  # not counted: said as such, never as 0
        counts = {term: None for term in common}
    elif narrowed.threads is not None:  # only some threads were read: the index counts each common term's threads
        indexed = token_index.count_hits(conn, common, attributed | narrowed.unindexed, decryptor)
        counts = {
            term: indexed.get(term, 0) + len(raw_threads.get(term, set()) & narrowed.unindexed) for term in common
        }
    else:
        counts = {term: len(raw_threads.get(term, ())) for term in common}
    terms = [Term(t.term, t.kind, t.customers, counts[t.term] if t.common else confirmed.get(t.term, 0)) for t in terms]
    common_threads = sorted({th for t in terms if t.common for th in raw_threads.get(t.term, ())})
    raw_distinctive = sorted({th for t in terms if not t.common for th in raw_threads.get(t.term, ())})
    return Residue(
        customer_id,
        terms,
        matches,
        len(pairs),
        ran,
        common_threads,
        raw_distinctive,
        not_scanned,
        narrowed.stale_count,
    )


def residue_scan(
    db: Database, customer_id: str, config: Attribution | None = None, subjects: Subjects | None = None
) -> Residue:
    """Unattributed threads holding the customer's id (whole token) or their documents' values. Raises
    InvalidIdentifier for a bad id (parsed here unless it already is a CustomerId)."""
    customer_id = CustomerId.parse(customer_id)
    capture_sync(db)  # the value holders and the token index's dirty threads include every write until now
    with db.connection() as conn:
        subjects = subjects or resolve_conn(conn, customer_id, config or Attribution.from_settings())
        return residue_conn(conn, customer_id, subjects.threads)
