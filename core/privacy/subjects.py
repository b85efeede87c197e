"""The threads about one customer: one answer, used by the Checkpoints page, the erasure and the access export.

LangGraph puts no customer id anywhere by itself (`create_agent` stores `{source, step, parents}` in
checkpoint metadata), so "the threads of C9" is found from several sources, each reported on its own:
- `metadata:<key>`: checkpoint metadata keys (config `SUBJECT_METADATA_KEYS`; our agents tag `cliente_id`,
  the Agent Server tags `user_id`);
- `pattern:<pattern>`: thread ids matching a configured pattern such as `cliente-{id}-*` (the id kept literal:
  `%` and `_` are escaped in LIKE);
- `store:hilo`: the `hilo` back-link the memory article's `recordar_preferencia` writes into each preference
  document (read before an erasure deletes the documents);
- `conversations`: our conversation log; `register`: earlier erasure requests;
- `query`: an optional SQL query on the application's own tables (`SUBJECT_THREAD_QUERY`), run in a READ ONLY
  transaction with a statement timeout.

`residue_scan` then looks at every thread no source attributed for the customer id (whole token) and the values of
the customer's own store documents: a raw-bytes filter first, then the SQL decoder confirms and gives a snippet. A
value other customers' documents also hold (a store id like `T002`) is *common*: listed, never proposed.

`coverage` says how much of the checkpoint data no source attributes to anyone.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

import psycopg
from psycopg import sql as pgsql

from core.config import DEFAULT_SUBJECT_METADATA_KEYS, DEFAULT_SUBJECT_THREAD_PATTERNS, Settings, load_settings
from core.db import Database
from core.memory.store import InvalidIdentifier, validate_label

ROOT = "clientes"
HILO_KEY = "hilo"  # the back-link field of the article's preference documents
QUERY_TIMEOUT_MS = 5000  # statement timeout of the configured query
SNIPPET_CHARS = 60  # characters either side of a residue match
MIN_TERM_LENGTH = 3  # shorter store values ("sí", "1") match everywhere and prove nothing
# A document value held by more customers than this is common: listed with its count, never proposed.
COMMON_CUSTOMERS = 1
# Store value keys that are never terms: the back-link (a thread id) and the article's closed schema fields
# (`tipo` is one of four words, `origen` is "cliente"): words every conversation may hold, not personal data.
NON_TERM_KEYS = frozenset({HILO_KEY, "tipo", "origen"})
PATTERN_SHAPE = re.compile(r"^[^{}]*\{id\}[^{}]*$")
METADATA_KEY_SHAPE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class AttributionConfigError(ValueError):
    """A configured pattern, metadata key or query is unusable (says which and why)."""


@dataclass(frozen=True)
class Attribution:
    """How threads are attributed to a customer (from Settings; see core/config.py)."""

    metadata_keys: tuple[str, ...] = DEFAULT_SUBJECT_METADATA_KEYS
    thread_patterns: tuple[str, ...] = DEFAULT_SUBJECT_THREAD_PATTERNS
    thread_query: str | None = None

    def __post_init__(self) -> None:
        for key in self.metadata_keys:
            if not METADATA_KEY_SHAPE.match(key):
                raise AttributionConfigError(f"metadata key {key!r} is not an identifier")
        for pattern in self.thread_patterns:
            if not PATTERN_SHAPE.match(pattern):
                raise AttributionConfigError(f"thread pattern {pattern!r} must contain {{id}} exactly once")
        if self.thread_query is not None and "%(id)s" not in self.thread_query:
            raise AttributionConfigError("SUBJECT_THREAD_QUERY must use %(id)s for the customer id")

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> "Attribution":
        s = settings or load_settings()
        return cls(tuple(s.subject_metadata_keys), tuple(s.subject_thread_patterns), s.subject_thread_query or None)


def escape_like(text: str) -> str:
    """`text` as a literal inside a LIKE pattern with ESCAPE '\\'."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def like_for(pattern: str, customer_id: str | None) -> str:
    """The LIKE pattern of `pattern` (`*` = anything) for one customer, or for any customer (None)."""
    before, after = pattern.split("{id}")
    lit = (lambda part: "%".join(escape_like(p) for p in part.split("*")))
    middle = "%" if customer_id is None else escape_like(customer_id)
    return lit(before) + middle + lit(after)


# --- the sources ---------------------------------------------------------------------------------------

SELECT_BY_METADATA = "SELECT DISTINCT thread_id FROM checkpoints WHERE metadata ->> %(key)s = %(id)s"
SELECT_BY_PATTERN = r"SELECT DISTINCT thread_id FROM checkpoints WHERE thread_id LIKE %(like)s ESCAPE '\'"
SELECT_BY_HILO = r"""
SELECT DISTINCT value ->> 'hilo' AS thread_id FROM store
WHERE (prefix = %(prefix)s OR prefix LIKE %(prefix_like)s ESCAPE '\') AND value ? 'hilo'
  AND jsonb_typeof(value -> 'hilo') = 'string'"""
SELECT_BY_CONVERSATIONS = """
SELECT DISTINCT thread_id FROM core_conversations WHERE subject_root = %(root)s AND subject_id = %(id)s"""
SELECT_BY_REGISTER = """
SELECT DISTINCT unnest(thread_ids) AS thread_id FROM core_erasure_register WHERE customer_id = %(id)s"""


@dataclass
class Subjects:
    """The threads attributed to one customer, with the sources that found each one."""

    customer_id: str
    threads: dict[str, list[str]] = field(default_factory=dict)  # thread_id -> sources
    by_source: dict[str, list[str]] = field(default_factory=dict)  # source -> thread ids (also when empty)
    errors: dict[str, str] = field(default_factory=dict)  # source -> why it could not run

    @property
    def thread_ids(self) -> list[str]:
        return sorted(self.threads)

    def add(self, source: str, thread_ids: Iterable[str]) -> None:
        found = sorted({t for t in thread_ids if t})
        self.by_source[source] = found
        for t in found:
            self.threads.setdefault(t, []).append(source)


def _params(customer_id: str) -> dict[str, Any]:
    prefix = f"{ROOT}.{customer_id}"
    return {"id": customer_id, "root": ROOT, "prefix": prefix, "prefix_like": escape_like(prefix) + ".%"}


def _run_query(conn: psycopg.Connection, query: str, customer_id: str) -> list[str]:
    """The configured query, read-only and bounded; its first column (or `thread_id`) is the thread."""
    with conn.transaction():
        conn.execute("SET TRANSACTION READ ONLY")
        conn.execute(pgsql.SQL("SET LOCAL statement_timeout = {}").format(pgsql.Literal(QUERY_TIMEOUT_MS)))
        cur = conn.execute(query, {"id": customer_id})
        rows = cur.fetchall()
    out = []
    for row in rows:
        value = row.get("thread_id", next(iter(row.values()), None)) if isinstance(row, dict) else row[0]
        if value is not None:
            out.append(str(value))
    return out


def resolve_conn(conn: psycopg.Connection, customer_id: str, config: Attribution) -> Subjects:
    customer_id = validate_label(customer_id, "customer id")
    params = _params(customer_id)
    subjects = Subjects(customer_id)
    for key in config.metadata_keys:
        subjects.add(f"metadata:{key}", (r["thread_id"] for r in conn.execute(SELECT_BY_METADATA, {**params, "key": key})))
    for pattern in config.thread_patterns:
        like = like_for(pattern, customer_id)
        subjects.add(f"pattern:{pattern}", (r["thread_id"] for r in conn.execute(SELECT_BY_PATTERN, {"like": like})))
    subjects.add("store:hilo", (r["thread_id"] for r in conn.execute(SELECT_BY_HILO, params)))
    subjects.add("conversations", (r["thread_id"] for r in conn.execute(SELECT_BY_CONVERSATIONS, params)))
    subjects.add("register", (r["thread_id"] for r in conn.execute(SELECT_BY_REGISTER, params)))
    if config.thread_query:
        try:
            subjects.add("query", _run_query(conn, config.thread_query, customer_id))
        except psycopg.Error as exc:  # said on the page and in the evidence, never hidden
            subjects.errors["query"] = f"{type(exc).__name__}: {str(exc).strip()}"
    return subjects


def resolve(db: Database, customer_id: str, config: Attribution | None = None) -> Subjects:
    """The threads about `customer_id`, each with its sources. Raises InvalidIdentifier for a bad id."""
    customer_id = validate_label(customer_id, "customer id")
    config = config or Attribution.from_settings()
    with db.connection() as conn:
        return resolve_conn(conn, customer_id, config)


# --- residue scan ----------------------------------------------------------------------------------------

# The customer's own document values (strings, at any depth), except the back-link.
SELECT_DOCUMENT_VALUES = r"""
SELECT DISTINCT v #>> '{}' AS term
FROM store s, jsonb_path_query(s.value - %(skip)s::text[], 'strict $.**') AS p(v)
WHERE (s.prefix = %(prefix)s OR s.prefix LIKE %(prefix_like)s ESCAPE '\')
  AND jsonb_typeof(v) = 'string'"""
# How many customers' documents hold each term (any depth): the commonness of a term.
# One pass over the customers' documents whatever the number of terms (a jsonb_path_exists per term made
# 2,500 terms scan the store 2,500 times: 9 s for one customer's access export).
SELECT_TERM_CUSTOMERS = r"""
SELECT leaf #>> '{}' AS term, count(DISTINCT split_part(s.prefix, '.', 2)) AS customers
FROM store s CROSS JOIN LATERAL jsonb_path_query(s.value, 'strict $.**') AS leaf
WHERE s.prefix LIKE 'clientes.%%' AND jsonb_typeof(leaf) = 'string' AND (leaf #>> '{}') = ANY(%(terms)s::text[])
GROUP BY 1"""
# Raw-bytes filter over every checkpoint table, threads already attributed left out. Cheap: no decoding.
RESIDUE_CANDIDATES_SQL = """
SELECT t.term, w.thread_id FROM checkpoint_writes w
JOIN unnest(%(terms)s::text[]) AS t(term) ON position(convert_to(t.term, 'UTF8') IN w.blob) > 0
WHERE NOT (w.thread_id = ANY(%(attributed)s))
UNION
SELECT t.term, b.thread_id FROM checkpoint_blobs b
JOIN unnest(%(terms)s::text[]) AS t(term) ON position(convert_to(t.term, 'UTF8') IN b.blob) > 0
WHERE NOT (b.thread_id = ANY(%(attributed)s))
UNION
SELECT t.term, c.thread_id
-- each checkpoint cast to text once, not once per term (OFFSET 0 keeps the subquery from being inlined)
FROM (SELECT thread_id, checkpoint::text AS txt FROM checkpoints WHERE NOT (thread_id = ANY(%(attributed)s)) OFFSET 0) c
JOIN unnest(%(terms)s::text[]) AS t(term) ON strpos(c.txt, t.term) > 0"""
# Confirmation by the SQL decoder: one thread's decoded pending writes and channel values, as text.
SELECT_DECODED_THREAD = """
SELECT payload::text AS text FROM core_checkpoint_writes_view WHERE thread_id = %(thread_id)s
UNION ALL
SELECT channel_values::text FROM core_checkpoints_view WHERE thread_id = %(thread_id)s"""


# The residue as one count, decoder-confirmed in SQL (what an erasure's evidence records and a re-check
# repeats): raw-bytes filter, then the decoded payload must match the term (the id as a whole token).
RESIDUE_COUNT_SQL = """
SELECT count(DISTINCT r.thread_id) AS n FROM (
    SELECT w.thread_id FROM checkpoint_writes w
    JOIN unnest(%(raws)s::text[], %(rxs)s::text[]) AS t(raw, rx) ON position(convert_to(t.raw, 'UTF8') IN w.blob) > 0
    WHERE NOT (w.thread_id = ANY(%(left)s)) AND core_checkpoint_payload(w.type, w.blob)::text ~ t.rx
    UNION ALL
    SELECT b.thread_id FROM checkpoint_blobs b
    JOIN unnest(%(raws)s::text[], %(rxs)s::text[]) AS t(raw, rx) ON position(convert_to(t.raw, 'UTF8') IN b.blob) > 0
    WHERE NOT (b.thread_id = ANY(%(left)s)) AND core_checkpoint_payload(b.type, b.blob)::text ~ t.rx
    UNION ALL
    SELECT c.thread_id
    FROM (SELECT thread_id, checkpoint::text AS txt FROM checkpoints WHERE NOT (thread_id = ANY(%(left)s)) OFFSET 0) c
    JOIN unnest(%(raws)s::text[], %(rxs)s::text[]) AS t(raw, rx) ON strpos(c.txt, t.raw) > 0
    WHERE c.txt ~ t.rx
) r"""


def _are_escape(text: str) -> str:
    """`text` as a literal in a PostgreSQL regular expression (ARE)."""
    return "".join(ch if ch.isalnum() or ch == " " else "\\" + ch for ch in text)


def residue_count_params(terms: Iterable["Term"], left: Iterable[str]) -> dict[str, Any]:
    """Parameters of RESIDUE_COUNT_SQL for these terms (common ones dropped), threads in `left` excepted."""
    raws, rxs = [], []
    for t in terms:
        if t.common:
            continue
        body = _are_escape(_json_text(t.term))
        raws.append(t.term)
        rxs.append(f"(^|[^A-Za-z0-9_%]){body}($|[^A-Za-z0-9_%])" if t.kind == "id" else body)
    return {"raws": raws, "rxs": rxs, "left": sorted(set(left))}


@dataclass(frozen=True)
class Term:
    """One search term: the customer id or a value of the customer's documents."""

    term: str
    kind: str  # id / value
    customers: int  # customers whose documents hold it (1 = only this one; the id counts as 1)
    threads: int = 0  # unattributed threads holding it (decoder-confirmed; raw-bytes count for a common term)

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

    customer_id: str
    terms: list[Term]
    matches: list[ResidueMatch]  # one per (thread, term), confirmed by the decoder
    candidates: int  # (term, thread) pairs the raw-bytes filter let through
    sql: str  # the raw-bytes query as it ran (literal)
    common_threads: list[str] = field(default_factory=list)  # raw matches of common terms only (not proposed)

    @property
    def proposed(self) -> list[str]:
        """Threads matched by at least one distinctive (not common) term: the DPO decides each one."""
        return sorted({m.thread_id for m in self.matches if not m.common})

    @property
    def common_only(self) -> list[str]:
        """Threads where only common terms were found: listed, not proposed."""
        return sorted(set(self.common_threads) - set(self.proposed))

    def matches_of(self, thread_id: str) -> list[ResidueMatch]:
        return [m for m in self.matches if m.thread_id == thread_id]


def token_regex(term: str, kind: str) -> re.Pattern[str]:
    """The id as a whole token (`C9` not inside `C9x` or `xC9`); a value as written."""
    if kind == "id":
        return re.compile(r"(?<![A-Za-z0-9_%])" + re.escape(term) + r"(?![A-Za-z0-9_%])")
    return re.compile(re.escape(term))


def _snippet(text: str, m: re.Match[str]) -> str:
    start, end = max(0, m.start() - SNIPPET_CHARS), min(len(text), m.end() + SNIPPET_CHARS)
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


def _json_text(term: str) -> str:
    """How `term` appears inside JSON text (the decoded payloads), quotes and backslashes escaped."""
    import json

    return json.dumps(term, ensure_ascii=False)[1:-1]


def customer_terms(conn: psycopg.Connection, customer_id: str, extra_values: Iterable[str] = ()) -> list[Term]:
    """The id and the distinctive values of the customer's documents, each with its commonness."""
    params = _params(customer_id)
    values = {r["term"] for r in conn.execute(SELECT_DOCUMENT_VALUES, {**params, "skip": list(NON_TERM_KEYS)})}
    values |= set(extra_values)
    values = sorted(v for v in values if len(v.strip()) >= MIN_TERM_LENGTH and v != customer_id)
    counts = {r["term"]: int(r["customers"])
              for r in conn.execute(SELECT_TERM_CUSTOMERS, {"terms": values})} if values else {}
    terms = [Term(customer_id, "id", 1)]
    terms += [Term(v, "value", max(1, counts.get(v, 0))) for v in values]
    return terms


def residue_conn(conn: psycopg.Connection, customer_id: str, attributed: Iterable[str],
                 terms: list[Term] | None = None) -> Residue:
    customer_id = validate_label(customer_id, "customer id")
    terms = terms if terms is not None else customer_terms(conn, customer_id)
    by_term = {t.term: t for t in terms}
    params = {"terms": [t.term for t in terms], "attributed": sorted(set(attributed))}
    literal = pgsql.SQL(RESIDUE_CANDIDATES_SQL.replace("%(terms)s", "{terms}").replace("%(attributed)s", "{att}")).format(
        terms=pgsql.Literal(params["terms"]), att=pgsql.Literal(params["attributed"])).as_string(conn)
    pairs = conn.execute(RESIDUE_CANDIDATES_SQL, params).fetchall()
    threads: dict[str, set[str]] = {}
    for row in pairs:
        threads.setdefault(row["thread_id"], set()).add(row["term"])
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
            rx = token_regex(_json_text(term), t.kind)
            hit = next(((text, m) for text in texts if (m := rx.search(text))), None)
            if hit is not None:
                matches.append(ResidueMatch(thread_id, term, t.kind, t.customers, False, _snippet(*hit)))
    confirmed: dict[str, int] = {}
    for m in matches:
        confirmed[m.term] = confirmed.get(m.term, 0) + 1
    terms = [Term(t.term, t.kind, t.customers, len(raw_threads.get(t.term, ())) if t.common else confirmed.get(t.term, 0))
             for t in terms]
    common_threads = sorted({th for t in terms if t.common for th in raw_threads.get(t.term, ())})
    return Residue(customer_id, terms, matches, len(pairs), literal, common_threads)


def residue_scan(db: Database, customer_id: str, config: Attribution | None = None,
                 subjects: Subjects | None = None) -> Residue:
    """Unattributed threads holding the customer's id (whole token) or their documents' values."""
    customer_id = validate_label(customer_id, "customer id")
    with db.connection() as conn:
        subjects = subjects or resolve_conn(conn, customer_id, config or Attribution.from_settings())
        return residue_conn(conn, customer_id, subjects.threads)


# --- attribution coverage ---------------------------------------------------------------------------------

# Per thread: bytes in the three checkpoint tables, and whether any source attributes it to *someone*
# (the configured query is per customer and cannot be asked "anyone": it is left out, and said so).
COVERAGE_SQL = r"""
WITH c AS (
    SELECT thread_id, sum(pg_column_size(checkpoint) + pg_column_size(metadata)) AS bytes,
           bool_or(metadata ?| %(keys)s::text[]) AS tagged
    FROM checkpoints GROUP BY thread_id
), b AS (
    SELECT thread_id, sum(coalesce(octet_length(blob), 0)) AS bytes FROM checkpoint_blobs GROUP BY thread_id
), w AS (
    SELECT thread_id, sum(coalesce(octet_length(blob), 0)) AS bytes FROM checkpoint_writes GROUP BY thread_id
), t AS (
    SELECT coalesce(c.thread_id, b.thread_id, w.thread_id) AS thread_id,
           coalesce(c.bytes, 0) + coalesce(b.bytes, 0) + coalesce(w.bytes, 0) AS bytes, coalesce(c.tagged, false) AS tagged
    FROM c FULL JOIN b USING (thread_id) FULL JOIN w USING (thread_id)
), hilo AS (
    SELECT DISTINCT value ->> 'hilo' AS thread_id FROM store
    WHERE prefix LIKE 'clientes.%%' AND jsonb_typeof(value -> 'hilo') = 'string'
), own AS (
    SELECT thread_id FROM core_conversations WHERE subject_root = 'clientes'
    UNION SELECT unnest(thread_ids) FROM core_erasure_register
), a AS (
    SELECT t.*, (t.tagged OR t.thread_id LIKE ANY(%(likes)s::text[])
                 OR EXISTS (SELECT 1 FROM hilo h WHERE h.thread_id = t.thread_id)
                 OR EXISTS (SELECT 1 FROM own o WHERE o.thread_id = t.thread_id)) AS attributed
    FROM t
)
SELECT count(*) AS threads, count(*) FILTER (WHERE NOT attributed) AS unattributed_threads,
       coalesce(sum(bytes), 0) AS bytes, coalesce(sum(bytes) FILTER (WHERE NOT attributed), 0) AS unattributed_bytes
FROM a"""


@dataclass(frozen=True)
class Coverage:
    threads: int
    unattributed_threads: int
    bytes: int
    unattributed_bytes: int
    query_configured: bool

    @property
    def thread_share(self) -> float:
        """Share of threads no source attributes (0..1; 0 when there are no threads)."""
        return self.unattributed_threads / self.threads if self.threads else 0.0

    @property
    def byte_share(self) -> float:
        return self.unattributed_bytes / self.bytes if self.bytes else 0.0


def coverage(db: Database, config: Attribution | None = None) -> Coverage:
    """How much checkpoint data no source (metadata keys, patterns, `hilo` links, our logs) attributes."""
    config = config or Attribution.from_settings()
    likes = [like_for(p, None) for p in config.thread_patterns]
    row = db.fetch_one(COVERAGE_SQL, {"keys": list(config.metadata_keys), "likes": likes})
    return Coverage(int(row["threads"]), int(row["unattributed_threads"]), int(row["bytes"]),
                    int(row["unattributed_bytes"]), bool(config.thread_query))


__all__ = ["Attribution", "AttributionConfigError", "Coverage", "InvalidIdentifier", "Residue", "ResidueMatch",
           "Subjects", "Term", "coverage", "customer_terms", "like_for", "resolve", "resolve_conn", "residue_conn",
           "residue_scan", "token_regex"]
