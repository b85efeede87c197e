"""The residue terms of an erasure as the register keeps them: keyed hashes, never the values (issue 25).

An erasure looks for what remains of a customer by their id and the values of their documents (core.privacy.residue).
Our records must not keep what they record the removal of, so the register keeps each term as:
- `digest`: blake2b of the term's JSON text (as it appears in the decoded payloads), keyed with the configured secret
  (core.config.term_hash_key, never in the database) and salted with the request's random salt
  (`core_erasure_register.term_salt`): a re-check recognises the term without holding it;
- `tokens`: the hashes of its tokens (core.privacy.token_index.term_hashes, keyed with the same secret), which the
  token index is searched by;
- `first`: the hash of its first token (None when it does not start with a token character), `chars`: its length
  as JSON text, and `trail`: whether it ends with a token character (a match must then end a token);
- `ref` (`t1`, `t2`, ...): how the residue rows, the exclusions and the evidence name it.
A keyed hash cannot be read back, and without the secret it confirms no guess either (issue 43: unkeyed 32-bit token
hashes gave an erased phone number back to whoever read the register); the values themselves are never kept.

`Matcher` finds hashed terms in a decoded payload's JSON text with the semantics of `residue.token_regex` (a term's
edge that is a token character is a token boundary, a JSON escape counts as one); `find_threads` is the residue
search by hashes (a re-check's, and an erasure's for what earlier requests erased): the token index gives the
candidate threads, the decoder's text confirms them. A customer's requests share one salt, and each request carries
the terms of the one before (`merge`): erased again once the store is empty, a customer is still looked for by
every value an earlier request read.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

import psycopg
from psycopg.rows import DictRow

from core.config import term_hash_key
from core.history import formats
from core.privacy import ours as ours_db
from core.privacy import residue as res
from core.privacy import token_index, tokens

SALT_BYTES = 16
DIGEST_BYTES = 16
# Every thread holding checkpoint data, for a re-check the token index cannot narrow (read in batches).
SELECT_ALL_THREADS = """
SELECT thread_id FROM checkpoints UNION SELECT thread_id FROM checkpoint_writes
UNION SELECT thread_id FROM checkpoint_blobs"""
TOKENIZE_BATCH = 500  # threads tokenized at once when checking threads the index has not read
DECODE_BATCH = 500  # candidate threads whose decoded payloads one query streams
# The candidates' decoded payloads (residue.SELECT_DECODED_THREAD for many threads at once), streamed row by row.
SELECT_DECODED_THREADS = """
SELECT thread_id, payload::text AS text FROM core_checkpoint_writes_view WHERE thread_id = ANY(%(threads)s)
UNION ALL
SELECT thread_id, channel_values::text FROM core_checkpoints_view WHERE thread_id = ANY(%(threads)s)"""


def new_salt() -> str:
    return secrets.token_hex(SALT_BYTES)


def _digest(salt: bytes, text: str) -> str:
    """Keyed with the configured secret (core.config.term_hash_key) and salted per customer: the salt is in the
    row, the secret is not in the database (issue 43)."""
    return hashlib.blake2b(text.encode("utf-8"), key=term_hash_key(), salt=salt, digest_size=DIGEST_BYTES).hexdigest()


@dataclass(frozen=True)
class HashedTerm:
    """One residue term as the register keeps it (see the module docstring)."""

    ref: str
    kind: str  # id / value
    customers: int
    threads: int | None
    common: bool
    digest: str
    chars: int
    tokens: tuple[int, ...]
    first: int | None
    trail: bool
    # the fingerprint of the TERM_HASH_KEY its hashes were made with (tokens.term_key_fingerprint); None: a term
    # hashed before fingerprints were kept, taken to be under the running key
    key: str | None = None

    @property
    def foreign(self) -> bool:
        """Hashed under another TERM_HASH_KEY than the running one: no hash made now can recognise it."""
        return self.key is not None and self.key != tokens.term_key_fingerprint()

    def to_json(self) -> dict:
        return {
            "ref": self.ref,
            "kind": self.kind,
            "customers": self.customers,
            "threads": self.threads,
            "common": self.common,
            "digest": self.digest,
            "chars": self.chars,
            "tokens": list(self.tokens),
            "first": self.first,
            "trail": self.trail,
        } | ({"key": self.key} if self.key is not None else {})

    @classmethod
    def from_json(cls, d: Mapping) -> HashedTerm:
        """Raises ValueError for a term kept verbatim (a register row written before migration 056's repair)."""
        if "term" in d or "digest" not in d:
            raise ValueError("a residue term kept verbatim: run `python -m core.migrate` (its register repair)")
        return cls(
            d["ref"],
            d["kind"],
            int(d["customers"]),
            d.get("threads"),
            bool(d["common"]),
            d["digest"],
            int(d["chars"]),
            tuple(d["tokens"]),
            d.get("first"),
            bool(d["trail"]),
            d.get("key"),
        )


def hash_term(term: res.Term, ref: str, salt: str) -> HashedTerm:
    text = res.json_text(term.term)
    head = tokens.TOKEN.match(term.term)
    return HashedTerm(
        ref,
        term.kind,
        term.customers,
        term.threads,
        term.common,
        _digest(bytes.fromhex(salt), text),
        len(text),
        tuple(token_index.term_hashes(term.term)),
        tokens.token_hash(head.group()) if head else None,
        bool(res.TOKEN_CHAR.match(term.term[-1:])),
        tokens.term_key_fingerprint(),
    )


def hash_terms(terms: Iterable[res.Term], salt: str) -> list[HashedTerm]:
    """The terms in order, each with its reference `t1`, `t2`, ..."""
    return [hash_term(t, f"t{n}", salt) for n, t in enumerate(terms, start=1)]


def by_reference(rows: Iterable[dict], refs: Mapping[str, str]) -> list[dict]:
    """Residue rows or exclusions ({..., terms: [term, ...]}) with each term replaced by its reference."""
    return [{**r, "terms": [refs[t] for t in r.get("terms") or ()]} for r in rows]


def _blank_escapes(text: str) -> str:
    """`text` with every JSON escape replaced by as many spaces: same positions, and an escape is a boundary."""
    return tokens.JSON_ESCAPE.sub(lambda m: " " * len(m.group()), text)


class Matcher:
    """Finds hashed terms in JSON texts (the decoder's output), as `residue.token_regex` finds the terms."""

    def __init__(self, terms: Iterable[HashedTerm], salt: str):
        self.key = bytes.fromhex(salt)
        self.by_first: dict[int, list[HashedTerm]] = {}
        self.anywhere: dict[int, list[HashedTerm]] = {}  # by length: terms that start with no token character
        for t in terms:
            if t.first is None:
                self.anywhere.setdefault(t.chars, []).append(t)
            else:
                self.by_first.setdefault(t.first, []).append(t)

    def _ends_well(self, blank: str, end: int, term: HashedTerm) -> bool:
        return not (term.trail and end < len(blank) and res.TOKEN_CHAR.match(blank[end]))

    def found(self, text: str) -> set[str]:
        """References of the terms `text` holds."""
        blank = _blank_escapes(text)
        out: set[str] = set()
        for m in tokens.TOKEN.finditer(blank):  # a term starting with a token character starts a token
            for term in self.by_first.get(tokens.token_hash(m.group()), ()):
                end = m.start() + term.chars
                if (
                    term.ref not in out
                    and end <= len(text)
                    and self._ends_well(blank, end, term)
                    and _digest(self.key, text[m.start() : end]) == term.digest
                ):
                    out.add(term.ref)
        for chars, terms in self.anywhere.items():
            wanted = {t.digest: t for t in terms}
            for start in range(len(text) - chars + 1):
                hit = wanted.get(_digest(self.key, text[start : start + chars]))
                if hit is not None and self._ends_well(blank, start + chars, hit):
                    out.add(hit.ref)
        return out


def _holding(conn: psycopg.Connection[DictRow], threads: Iterable[str], terms: list[HashedTerm]) -> set[str]:
    """Of `threads` (not indexed yet, or every thread), those whose tokens include every token of some term."""
    wanted = [set(t.tokens) for t in terms]
    threads = sorted(set(threads))
    out: set[str] = set()
    for start in range(0, len(threads), TOKENIZE_BATCH):
        for thread, hashes in token_index.thread_token_hashes(conn, threads[start : start + TOKENIZE_BATCH]).items():
            if any(w <= hashes for w in wanted):
                out.add(thread)
    return out


def find_threads(
    conn: psycopg.Connection[DictRow], terms: Iterable[HashedTerm], salt: str, exclude: Iterable[str]
) -> dict[str, set[str]]:
    """The threads (but `exclude`) holding one of the distinctive `terms`, each with the references it holds:
    candidates from the token index (threads not indexed yet tokenized here; every thread when the index cannot
    narrow), confirmed on the decoder's text (DECODE_BATCH threads a query); encrypted rows read with the configured
    keys, those no key opens left unread (the residue scan names them not scanned): the queries do not grow with the
    number of encrypted threads."""
    terms = [t for t in terms if not t.common]
    if not terms:
        return {}
    exclude = set(exclude)
    decryptor = formats.decryptor()
    narrowed = token_index.candidates_of(conn, {t.ref: t.tokens for t in terms}, decryptor)
    if narrowed.threads is None:
        candidates = _holding(conn, (r["thread_id"] for r in conn.execute(SELECT_ALL_THREADS)), terms)
    else:  # threads named only for encrypted rows the index could not read are not decoded: read with the keys below
        candidates = set(narrowed.hit_threads - narrowed.unindexed) | _holding(conn, narrowed.unindexed, terms)
    matcher = Matcher(terms, salt)
    found: dict[str, set[str]] = {}
    todo = sorted(candidates - exclude)
    for start in range(0, len(todo), DECODE_BATCH):
        for r in conn.cursor().stream(SELECT_DECODED_THREADS, {"threads": todo[start : start + DECODE_BATCH]}):
            refs = matcher.found(r["text"]) if r["text"] else set()
            if refs:
                found.setdefault(r["thread_id"], set()).update(refs)
    # encrypted rows: those of the index's candidates read with the configured keys, as the residue scan reads them
    opened, _ = formats.encrypted_texts(conn, decryptor, exclude, only=narrowed.threads)
    for thread, texts in opened.items():
        refs = set().union(*(matcher.found(text) for text in texts))
        if refs:
            found.setdefault(thread, set()).update(refs)
    return found


SEARCH_DESCRIPTION = """-- the terms known by their keyed hashes only (core_erasure_register.residue_terms;
-- core/privacy/term_hashes.py): the threads the token index names for them (the lookup below, by token hashes),
-- plus the threads not indexed yet
-- whose tokens hold every token of a term (every thread when the index cannot narrow); each candidate's decoded
-- payloads (core_checkpoint_writes_view, core_checkpoints_view) matched against the hashes, and encrypted rows
-- read with the configured keys; threads left by the DPO excepted: {left}. Result: the threads holding a term.
"""


def describe(conn: psycopg.Connection[DictRow], terms: Iterable[HashedTerm], left: Iterable[str]) -> str:
    """What `find_threads` runs, for the evidence: the index lookup as literal SQL (token hashes, never a value)."""
    shares = token_index.token_shares(conn)
    keys = [k for k in (token_index.lookup_key(t.tokens, shares) for t in terms if not t.common) if k]
    keys += token_index.sealed_keys(keys, formats.decryptor())
    lookup = psycopg.ClientCursor(conn).mogrify(token_index.SELECT_HITS, {"keys": keys}).strip()
    return SEARCH_DESCRIPTION.format(left=", ".join(sorted(set(left))) or "none") + lookup


@dataclass(frozen=True)
class Earlier:
    """What earlier requests for a customer keep of their terms: the salt (reused, so that terms read again hash
    the same) and the hashed terms of the latest one (which carries those before it)."""

    request_id: int | None
    salt: str
    terms: tuple[HashedTerm, ...] = ()


SELECT_EARLIER = """
SELECT id, term_salt, residue_terms FROM core_erasure_register WHERE customer_id = %s AND term_salt IS NOT NULL
ORDER BY requested_at DESC, id DESC LIMIT 1"""


def earlier(conn: psycopg.Connection[DictRow], customer_id: str) -> Earlier:
    """What earlier requests for the customer keep, read in the register (our database: reached from `conn`)."""
    with ours_db.connect(conn) as mine:
        row = mine.execute(SELECT_EARLIER, (customer_id,)).fetchone()
    if row is None:
        return Earlier(None, new_salt())
    return Earlier(row["id"], row["term_salt"], tuple(HashedTerm.from_json(t) for t in row["residue_terms"] or ()))


def merge(terms: Iterable[res.Term], before: Earlier) -> tuple[list[HashedTerm], list[HashedTerm]]:
    """(the terms read now, hashed with the customer's salt; the earlier requests' terms not among them, carried
    so that an erasure and its re-checks keep looking for what the store no longer holds), numbered on."""
    now = hash_terms(terms, before.salt)
    digests = {h.digest for h in now}
    carried = [
        replace(t, ref=f"t{n}")
        for n, t in enumerate((t for t in before.terms if t.digest not in digests), start=len(now) + 1)
    ]
    return now, carried


__all__ = [
    "Earlier",
    "HashedTerm",
    "Matcher",
    "by_reference",
    "describe",
    "earlier",
    "find_threads",
    "hash_term",
    "hash_terms",
    "merge",
    "new_salt",
]
