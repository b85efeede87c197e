"""The token index of checkpoint threads (migration 042): which threads may hold a customer's terms.

The residue scan (core.privacy.residue) looks for a customer's id and document values in every thread no
attribution source gave. Reading every unattributed checkpoint row made one erasure take 214 s at 10M
checkpoint writes. This index keeps, per thread, the hashes of the tokens of everything the residue scan
matches against: the SQL decoder's JSON text of each pending write and channel-value blob, and the inline
channel values of each checkpoint. A term's candidates are the threads holding every token of the term,
plus the threads written since they were last indexed (`core_token_dirty`, kept by the change follower for any
writer). The scan then reads only those threads' rows, on their bytes and through the decoder, as before.

Tokens are defined in core.privacy.tokens (why a candidate set is complete: its docstring).

Encrypted rows (EncryptedSerializer) are decrypted here, in Python, with the configured keys
(core.history.formats.Decryptor), and their tokens are taken from the decoded JSON text the residue scan
matches (formats.encrypted_texts). Their token hashes are stored keyed with the key set (`Decryptor.keyed`): a
plain 32-bit hash of a short token (a customer id, a phone number) is confirmed by hashing guesses, which would
give away what the encryption hides to whoever reads the index. A lookup asks for both forms of a term. A thread's
rows no configured key opens are counted (`encrypted_unread`) and the key set it was read with is kept (`key_set`,
a fingerprint): the residue scan reads such threads, and those indexed under another key set, and names what no
key opens as not scanned; the sweep lists them again for indexing only when the configured keys change.

Every token hash is keyed with TERM_HASH_KEY (core.privacy.tokens.token_hash). Each row keeps the fingerprint of
the key it was hashed with (`term_key`, tokens.term_key_fingerprint, never the key): after a rotation a row made
under the old key answers no lookup made with the new one, so the residue scan reads those threads on their bytes,
as threads not indexed yet (or every thread, past DIRTY_SCAN_MAX of them), and the sweep lists them again and
re-indexes them under the running key. Each row also keeps a signature of the thread's checkpoint and write keys as
the indexer read them (`rows_sig`): where no change follower runs, the sweep's recount lists every thread whose rows
differ from it (core.capture.recount), whatever times its checkpoints carry.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import psycopg
from psycopg.rows import DictRow

from core.capture.follower import slot_name_for
from core.capture.recount import ROWS_SIGNATURE
from core.capture.status import sync as capture_sync
from core.db import Database, dashboard_dsn_of, decode_dsn_for, one
from core.history import formats
from core.privacy.tokens import payload_tokens, term_key_fingerprint, term_tokens, token_hash, tokens_of_json_text

log = logging.getLogger(__name__)

BATCH_THREADS = 500  # threads indexed per transaction
DIRTY_SCAN_MAX = 20_000  # beyond this many unindexed threads, a residue scan reads every row instead
CLAIM_EXPIRES = "10 minutes"  # a claim older than this (an indexer that died) is taken again
COMMON_TOKEN_SHARE = 0.01  # a token in more threads than this is not looked up when a term has rarer ones
REPLAY_WAIT_S = 60.0  # how long the indexer waits for a standby to replay what the follower had applied


# --- where each part lives (issue 52, B) ----------------------------------------------------------------
# core_thread_tokens and core_token_dirty are in the dashboard's own database (`db.ours`; core/sql/dashboard/001 and
# 003); the rows indexed are the agents', read where the change follower reads them (their standby when configured,
# core.db.decode_dsn_for). With the default (no PG_DASHBOARD, no standby) all three are one database, and a batch is
# read and written in one transaction as before.


@contextmanager
def _ours(conn: psycopg.Connection[DictRow]) -> Iterator[psycopg.Connection[DictRow]]:
    """A connection to the dashboard's database of the agents' database `conn` is connected to: `conn` itself when
    that is the agents' own (the default), else one from that database's pool."""
    ours = dashboard_dsn_of(conn)
    if ours is None:
        yield conn
        return
    with Database(ours).connection() as mine:
        yield mine


# --- the index ---------------------------------------------------------------------------------------

CLAIM = f"""
UPDATE core_token_dirty d SET claimed_at = now()
WHERE d.thread_id IN (
    SELECT thread_id FROM core_token_dirty
    WHERE claimed_at IS NULL OR claimed_at < now() - interval '{CLAIM_EXPIRES}'
    ORDER BY thread_id LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
RETURNING d.thread_id"""
SELECT_PAYLOADS = """
SELECT thread_id, type, blob FROM checkpoint_writes WHERE thread_id = ANY(%(threads)s)
UNION ALL
SELECT thread_id, type, blob FROM checkpoint_blobs WHERE thread_id = ANY(%(threads)s)"""
SELECT_INLINE = """
SELECT thread_id, (checkpoint -> 'channel_values')::text AS text FROM checkpoints
WHERE thread_id = ANY(%(threads)s) AND checkpoint -> 'channel_values' <> '{}'::jsonb"""
SELECT_DECODED = "SELECT core_checkpoint_payload(%(type)s, %(blob)s)::text AS text"
SELECT_ROWS_SIGNATURES = ROWS_SIGNATURE.format(where="WHERE thread_id = ANY(%(threads)s)")
UPSERT_TOKENS = """
INSERT INTO core_thread_tokens (thread_id, tokens, encrypted_unread, key_set, term_key, rows_sig)
SELECT t.thread_id, string_to_array(t.tokens, ',')::integer[], t.unread, t.key_set, %(term_key)s, t.sig
FROM unnest(%(threads)s::text[], %(tokens)s::text[], %(unread)s::integer[], %(key_sets)s::text[], %(sigs)s::numeric[])
     AS t(thread_id, tokens, unread, key_set, sig)
ON CONFLICT (thread_id) DO UPDATE SET tokens = EXCLUDED.tokens, encrypted_unread = EXCLUDED.encrypted_unread,
                                      key_set = EXCLUDED.key_set, term_key = EXCLUDED.term_key,
                                      rows_sig = EXCLUDED.rows_sig, indexed_at = now()"""
# Rows hashed under another term key than the running one (NULL: indexed before their key was recorded): they answer
# no lookup made now. Written as ranges so that the term_key index serves it (`<>` would not).
STALE = "(term_key IS NULL OR term_key < %(term_key)s OR term_key > %(term_key)s)"
SELECT_STALE = f"SELECT thread_id FROM core_thread_tokens WHERE {STALE} LIMIT %(cap)s"
COUNT_STALE = f"SELECT count(*) AS n FROM core_thread_tokens WHERE {STALE}"
RELIST_STALE = f"""
INSERT INTO core_token_dirty (thread_id)
SELECT thread_id FROM core_thread_tokens WHERE {STALE}
ON CONFLICT (thread_id) DO NOTHING"""
# Threads the index cannot answer for under the configured key set: encrypted rows no key opened when they were
# indexed, or encrypted rows indexed under another key set (their token hashes are keyed with it).
UNANSWERED = "(encrypted_unread > 0 OR key_set IS NOT NULL) AND key_set IS DISTINCT FROM %(key_set)s"
RELIST_UNANSWERED = f"""
INSERT INTO core_token_dirty (thread_id)
SELECT thread_id FROM core_thread_tokens WHERE {UNANSWERED}
ON CONFLICT (thread_id) DO NOTHING"""
SELECT_UNANSWERED = f"""
SELECT thread_id FROM core_thread_tokens WHERE encrypted_unread > 0 OR ({UNANSWERED})"""
COUNT_UNREAD = "SELECT count(*) AS n FROM core_thread_tokens WHERE encrypted_unread > 0"
DELETE_TOKENS = "DELETE FROM core_thread_tokens WHERE thread_id = ANY(%(threads)s)"
RELEASE = "DELETE FROM core_token_dirty WHERE thread_id = ANY(%(threads)s) AND claimed_at IS NOT NULL"
COUNT_PENDING = "SELECT count(*) AS n FROM (SELECT 1 FROM core_token_dirty LIMIT %(cap)s) d"
SELECT_PENDING = "SELECT thread_id FROM core_token_dirty LIMIT %(cap)s"
PRUNE_ORPHANS = """
DELETE FROM core_thread_tokens t WHERE NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = t.thread_id)
  AND NOT EXISTS (SELECT 1 FROM checkpoint_writes w WHERE w.thread_id = t.thread_id)"""
# The same where the index is not in the agents' database: (1) ours, the indexed threads with no checkpoint in the
# follower's shadow (M); (2) where the agents' rows are read, those of them still holding a checkpoint or a write
# (2Q, an array); (3) ours, the rest deleted.
SELECT_UNCHECKPOINTED = """
SELECT thread_id FROM core_thread_tokens t
WHERE NOT EXISTS (SELECT 1 FROM core_checkpoint_shadow c WHERE c.thread_id = t.thread_id)"""
SELECT_HOLDING = """
SELECT u.thread_id FROM unnest(%(threads)s::text[]) AS u(thread_id)
WHERE EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = u.thread_id)
   OR EXISTS (SELECT 1 FROM checkpoint_writes w WHERE w.thread_id = u.thread_id)"""
# What the follower had applied when threads were claimed (a standby read must have replayed at least that far).
SELECT_APPLIED = "SELECT lsn::text AS lsn FROM core_capture_position WHERE slot_name = %(slot)s"
SELECT_REPLAYED = """
SELECT NOT pg_is_in_recovery() OR pg_last_wal_replay_lsn() >= %(lsn)s::pg_lsn AS replayed"""
# Threads holding every token of one term (a GIN lookup per term; `keys` are comma-joined hashes).
SELECT_HITS = """
SELECT DISTINCT t.thread_id FROM unnest(%(keys)s::text[]) AS q(key)
CROSS JOIN LATERAL (SELECT thread_id FROM core_thread_tokens
                    WHERE tokens @> string_to_array(q.key, ',')::integer[]) t"""


@dataclass
class IndexResult:
    threads: int = 0  # threads (re)indexed
    payloads: int = 0  # writes and blobs read
    decoded_in_sql: int = 0  # payloads only the SQL decoder could read
    batches: int = 0
    pending: int = 0  # threads still waiting when it stopped (capped)
    encrypted_read: int = 0  # encrypted rows decrypted with a configured key
    unread_threads: int = 0  # threads of the index holding such rows after the run (named as not readable)


def _thread_tokens(
    conn: psycopg.Connection[DictRow],
    threads: list[str],
    result: IndexResult,
    decryptor: formats.Decryptor,
    unread: dict[str, int] | None = None,
    sealed: dict[str, set[str]] | None = None,
) -> dict[str, set[str]]:
    """Each thread's tokens; encrypted rows decrypted with `decryptor` (their tokens in `sealed` when given), those
    it cannot open counted in `unread`. A thread with rows is in the result, even when all its rows are sealed."""
    found: dict[str, set[str]] = {}
    with conn.cursor(name="core_token_payloads") as cur:
        cur.itersize = 2000
        cur.execute(SELECT_PAYLOADS, {"threads": threads})
        for row in cur:
            into = found.setdefault(row["thread_id"], set())
            result.payloads += 1
            if formats.is_encrypted(row["type"]):  # never sent back to PostgreSQL, not even to its decoder
                payload = decryptor.payload(row["type"], row["blob"])
                if formats.unread(payload):
                    if unread is not None:
                        unread[row["thread_id"]] = unread.get(row["thread_id"], 0) + 1
                else:
                    result.encrypted_read += 1
                    tokens_of_json_text(
                        json.dumps(payload, ensure_ascii=False),
                        into if sealed is None else sealed.setdefault(row["thread_id"], set()),
                    )
                continue
            tokens = payload_tokens(row["type"], row["blob"])
            if tokens is None:
                result.decoded_in_sql += 1
                text = one(conn.execute(SELECT_DECODED, {"type": row["type"], "blob": row["blob"]}).fetchone())["text"]
                tokens_of_json_text(text, into)
            else:
                into |= tokens
    for row in conn.execute(SELECT_INLINE, {"threads": threads}):
        tokens_of_json_text(row["text"], found.setdefault(row["thread_id"], set()))
    return found


@dataclass
class _Read:
    """What the indexer read of claimed threads on the agents' side, to be written in ours."""

    found: dict[str, set[str]]
    sigs: dict[str, object]
    unread: dict[str, int] = field(default_factory=dict)
    sealed: dict[str, set[str]] = field(default_factory=dict)


def _read_claimed(
    conn: psycopg.Connection[DictRow], claimed: list[str], result: IndexResult, decryptor: formats.Decryptor
) -> _Read:
    """Read `claimed` threads' signatures, then their rows' tokens (in the caller's transaction on the agents' side)."""
    # what the threads hold, read before their rows: a row written in between makes the signature differ later
    # (the thread is listed again), never the reverse
    sigs = {r["thread_id"]: r["sig"] for r in conn.execute(SELECT_ROWS_SIGNATURES, {"threads": claimed})}
    read = _Read({}, sigs)
    read.found = _thread_tokens(conn, claimed, result, decryptor, read.unread, read.sealed)
    return read


def _write_claimed(
    conn: psycopg.Connection[DictRow],
    claimed: list[str],
    read: _Read,
    result: IndexResult,
    decryptor: formats.Decryptor,
) -> None:
    """Write what was read of `claimed` threads into the index (in the caller's transaction on ours), then un-list
    those not written since their claim."""
    found, sealed, unread, sigs = read.found, read.sealed, read.unread, read.sigs
    present = sorted(found)

    def hashes(thread: str) -> str:
        plain = {token_hash(t) for t in found[thread]}
        return ",".join(map(str, sorted(plain | {decryptor.keyed(token_hash(t)) for t in sealed.get(thread, ())})))

    if present:
        conn.execute(
            UPSERT_TOKENS,
            {
                "threads": present,
                "tokens": [hashes(th) for th in present],
                "unread": [unread.get(th, 0) for th in present],
                "key_sets": [decryptor.key_set if th in unread or th in sealed else None for th in present],
                "sigs": [sigs.get(th) for th in present],
                "term_key": term_key_fingerprint(),
            },
        )

    gone = sorted(set(claimed) - set(found))
    if gone:
        conn.execute(DELETE_TOKENS, {"threads": gone})
    conn.execute(RELEASE, {"threads": claimed})
    result.threads += len(claimed)


def index_claimed(
    conn: psycopg.Connection[DictRow],
    claimed: list[str],
    result: IndexResult,
    decryptor: formats.Decryptor | None = None,
) -> None:
    """Index `claimed` threads (in the caller's transaction, begun after the claim was committed; encrypted rows
    read with `decryptor`, default the configured keys), then un-list those not written since their claim. The rows
    are read on `conn`; the index is written in its dashboard's database (`conn` itself by default)."""
    decryptor = decryptor if decryptor is not None else formats.decryptor()
    read = _read_claimed(conn, claimed, result, decryptor)
    with _ours(conn) as ours:
        if ours is conn:
            _write_claimed(conn, claimed, read, result, decryptor)
        else:
            with ours.transaction():
                _write_claimed(ours, claimed, read, result, decryptor)


def _wait_replayed(src: psycopg.Connection[DictRow], lsn: str | None) -> None:
    """On a standby, wait until it replayed `lsn` (what the follower had applied when the threads were claimed:
    the plan's standby rule), else a thread marked since would be read as it was before the mark and un-listed."""
    if lsn is None:
        return
    deadline = time.monotonic() + REPLAY_WAIT_S
    while not one(src.execute(SELECT_REPLAYED, {"lsn": lsn}).fetchone())["replayed"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the agents' standby did not replay up to {lsn} within {REPLAY_WAIT_S:.0f} s")
        time.sleep(0.05)


def _index_batch(db: Database, limit: int, result: IndexResult, decryptor: formats.Decryptor) -> list[str]:
    """Claim up to `limit` threads and index them; returns the threads claimed (none: nothing pending)."""
    source = decode_dsn_for(db.dsn)
    ours = db.ours
    if ours is db and source == db.dsn:  # one database: claim, then read and write in one transaction
        with db.connection() as conn:
            with conn.transaction():
                claimed = [r["thread_id"] for r in conn.execute(CLAIM, {"limit": limit})]
            if claimed:
                with conn.transaction():  # a snapshot taken after the claim was committed
                    index_claimed(conn, claimed, result, decryptor)
        return claimed
    # apart (2Q): claim in ours (committed), read where the follower reads, write in ours
    slot = slot_name_for(str(psycopg.conninfo.conninfo_to_dict(db.dsn).get("dbname") or ""))
    with ours.connection() as mine:
        with mine.transaction():
            claimed = [r["thread_id"] for r in mine.execute(CLAIM, {"limit": limit})]
            applied = mine.execute(SELECT_APPLIED, {"slot": slot}).fetchone()
    if not claimed:
        return claimed
    with Database(source).connection() as src:
        _wait_replayed(src, applied["lsn"] if applied else None)
        with src.transaction():  # a snapshot taken after the claim was committed
            read = _read_claimed(src, claimed, result, decryptor)
    with ours.connection() as mine, mine.transaction():
        _write_claimed(mine, claimed, read, result, decryptor)
    return claimed


def index_pending(
    db: Database,
    *,
    max_threads: int | None = None,
    batch: int = BATCH_THREADS,
    on_batch: Callable[[IndexResult], None] | None = None,
    decryptor: formats.Decryptor | None = None,
) -> IndexResult:
    """Index the threads written since they were last indexed (all of them, or up to `max_threads`), encrypted
    rows read with `decryptor` (default: the configured keys). Safe beside writers and other indexers: a thread
    written after its claim stays listed."""
    result = IndexResult()
    decryptor = decryptor if decryptor is not None else formats.decryptor()
    capture_sync(db)  # every thread written until now is listed (the change follower lists them: core/capture)
    while max_threads is None or result.threads < max_threads:
        limit = batch if max_threads is None else min(batch, max_threads - result.threads)
        claimed = _index_batch(db, limit, result, decryptor)
        if not claimed:
            break
        result.batches += 1
        if on_batch:
            on_batch(result)
        if len(claimed) < limit:
            break
    result.pending = pending(db)
    result.unread_threads = one(db.ours.fetch_one(COUNT_UNREAD, read_only=False))["n"]
    log.info(
        "token index: %d threads (%d payloads, %d through the SQL decoder, %d encrypted read with the keys) "
        "in %d batches, %d pending",
        result.threads,
        result.payloads,
        result.decoded_in_sql,
        result.encrypted_read,
        result.batches,
        result.pending,
    )
    if result.unread_threads:
        log.warning(
            "token index: %d threads hold encrypted rows not readable (%s); the residue scan names them as not scanned",
            result.unread_threads,
            "no configured key opens them" if decryptor else "no AES key configured: LANGGRAPH_AES_KEYS",
        )
    return result


def pending(db: Database, cap: int = 100_000) -> int:
    return one(db.ours.fetch_one(COUNT_PENDING, {"cap": cap}, read_only=False))["n"]


def prune_orphans(db: Database) -> int:
    """Drop the tokens of threads that hold no checkpoint and no pending write any more; returns how many."""
    ours, source = db.ours, decode_dsn_for(db.dsn)
    if ours is db and source == db.dsn:
        return db.execute(PRUNE_ORPHANS)
    candidates = [r["thread_id"] for r in ours.fetch(SELECT_UNCHECKPOINTED, read_only=False)]
    if not candidates:
        return 0
    holding = {r["thread_id"] for r in Database(source).fetch(SELECT_HOLDING, {"threads": candidates})}
    gone = sorted(set(candidates) - holding)
    return ours.execute(DELETE_TOKENS, {"threads": gone}) if gone else 0


def sweep_step(db: Database, decryptor: formats.Decryptor | None = None) -> IndexResult:
    """The sweep job's step: drop the tokens of deleted threads, list again the threads indexed under another term
    hash key (TERM_HASH_KEY rotated) and those whose encrypted rows no key opened when the configured keys have
    changed since, then index every pending thread."""
    decryptor = decryptor if decryptor is not None else formats.decryptor()
    prune_orphans(db)
    relisted = db.ours.execute(RELIST_STALE, {"term_key": term_key_fingerprint()})
    if relisted:
        log.warning("token index: %d threads indexed under another term hash key, listed for re-indexing", relisted)
    if decryptor:
        db.ours.execute(RELIST_UNANSWERED, {"key_set": decryptor.key_set})
    return index_pending(db, decryptor=decryptor)


@dataclass(frozen=True)
class Candidates:
    """Threads the residue scan must read for some terms: None = every thread (the index cannot answer)."""

    threads: frozenset[str] | None
    hits: int = 0  # threads the index gave
    # threads written since they were last indexed, and those indexed under another term hash key (`stale`): the
    # index cannot answer for them, the scan reads them
    unindexed: frozenset[str] = frozenset()
    why_full: str = ""  # why every thread is read, when it is
    # indexed threads with encrypted rows the index cannot answer for (no configured key opened them, or indexed
    # under another key set): in `threads`
    encrypted_unread: frozenset[str] = frozenset()
    hit_threads: frozenset[str] = frozenset()  # the `hits` threads
    stale: frozenset[str] = frozenset()  # indexed under another term hash key (TERM_HASH_KEY rotated): in `unindexed`
    stale_count: int = 0  # how many threads of the index are so (also when every thread is read)

    def describe(self) -> str:
        if self.threads is None:
            return f"every thread ({self.why_full})"
        text = (
            f"{len(self.threads)} threads: {self.hits} from the token index (core_thread_tokens), "
            f"{len(self.unindexed - self.stale)} not indexed yet (core_token_dirty)"
        )
        if self.stale:
            text += f"; {stale_reason(self.stale_count)}: read on their bytes"
        if self.encrypted_unread:
            text += (
                f"; {len(self.encrypted_unread)} threads hold encrypted rows the index could not read (no "
                f"configured key opened them, or read under other keys): read with the keys, else named as "
                f"not scanned"
            )
        return text


def stale_reason(n: int) -> str:
    """Why `n` threads are read whatever the index says (after a TERM_HASH_KEY rotation)."""
    return f"token index built under another term key; re-indexing {n:,} threads"


def term_hashes(term: str) -> list[int]:
    """The hashes of a term's tokens, without repeats: what the index is searched by. The erasure register keeps
    these in place of the term (core.privacy.term_hashes), so that a re-check can still ask the index."""
    return list(dict.fromkeys(token_hash(t) for t in term_tokens(term)))


def lookup_key(hashes: Sequence[int], shares: Mapping[int, float] | None = None) -> str | None:
    """The lookup key of a term with these token hashes (comma-joined), None for a term without a token. With
    `shares` (token hash -> share of threads holding it), the tokens held by more than COMMON_TOKEN_SHARE of the
    threads are left out of the key, but for the rarest one when all are: a key with fewer tokens names more
    threads (the scan confirms each), and each common token's posting list was most of a lookup's cost."""
    hashes = list(dict.fromkeys(hashes))
    if not hashes:
        return None
    if shares:
        hashes = [h for h in hashes if shares.get(h, 0.0) <= COMMON_TOKEN_SHARE] or [
            min(hashes, key=lambda h: shares.get(h, 0.0))
        ]
    return ",".join(map(str, hashes))


def lookup_keys(terms: Iterable[str], shares: dict[int, float] | None = None) -> dict[str, str]:
    """Each term's lookup key (a term without a token has none)."""
    keys = {term: lookup_key(term_hashes(term), shares) for term in set(terms)}
    return {term: key for term, key in keys.items() if key is not None}


# The tokens ANALYZE found in the most threads, with the share of threads holding each (none before an ANALYZE).
SELECT_TOKEN_SHARES = """
SELECT most_common_elems::text::integer[] AS tokens, most_common_elem_freqs AS shares FROM pg_stats
WHERE attname = 'tokens' AND (quote_ident(schemaname) || '.' || quote_ident(tablename))::regclass
                             = 'core_thread_tokens'::regclass"""


def token_shares(conn: psycopg.Connection[DictRow]) -> dict[int, float]:
    """Token hash -> share of indexed threads holding it, for the most common tokens (ANALYZE's statistics; read in
    the dashboard's database of the agents' database `conn` is connected to)."""
    with _ours(conn) as ours:
        row = ours.execute(SELECT_TOKEN_SHARES).fetchone()
    # most_common_elem_freqs ends with three more figures (min, max, null share): not tokens, left out
    return dict(zip(row["tokens"], row["shares"], strict=False)) if row and row["tokens"] else {}


def candidates(
    conn: psycopg.Connection[DictRow], terms: Iterable[str], decryptor: formats.Decryptor | None = None
) -> Candidates:
    """The threads that may hold any of `terms` (a superset: the scan confirms), or every thread when a
    term has no token or too many threads wait for the indexer."""
    return candidates_of(conn, {term: term_hashes(term) for term in set(terms)}, decryptor)


def _sealed_key(key: str, decryptor: formats.Decryptor) -> str:
    """A lookup key as the index stores the tokens of encrypted rows (keyed with the key set)."""
    return ",".join(str(decryptor.keyed(int(h))) for h in key.split(","))


def sealed_keys(keys: Iterable[str], decryptor: formats.Decryptor) -> list[str]:
    """The lookup keys of encrypted rows' tokens for these lookup keys (none without configured keys)."""
    return [_sealed_key(k, decryptor) for k in keys] if decryptor else []


def candidates_of(
    conn: psycopg.Connection[DictRow], hashes: Mapping[str, Sequence[int]], decryptor: formats.Decryptor | None = None
) -> Candidates:
    """`candidates` for terms known by their token hashes only (`term_hashes`; keyed by a term or a reference
    to it): the threads holding every token of one of them (in plaintext rows, or in encrypted rows read with the
    configured keys: `decryptor`, by default), plus the threads not indexed yet and those whose encrypted rows the
    index cannot answer for. `conn` is on the agents' database; the index is read in its dashboard's database."""
    with _ours(conn) as ours:
        return _candidates_of(ours, hashes, decryptor)


def _candidates_of(
    conn: psycopg.Connection[DictRow], hashes: Mapping[str, Sequence[int]], decryptor: formats.Decryptor | None
) -> Candidates:
    """candidates_of, `conn` on the database holding the index."""
    decryptor = decryptor if decryptor is not None else formats.decryptor()
    shares = token_shares(conn)
    keys = {name: lookup_key(h, shares) for name, h in hashes.items()}
    missing = sorted(name for name, key in keys.items() if key is None)
    if missing:
        return Candidates(None, why_full=f"the term {missing[0]!r} has no token the index can look up")
    unindexed = [r["thread_id"] for r in conn.execute(SELECT_PENDING, {"cap": DIRTY_SCAN_MAX + 1})]
    if len(unindexed) > DIRTY_SCAN_MAX:
        return Candidates(None, why_full=f"more than {DIRTY_SCAN_MAX:,} threads wait for the token indexer")
    # rows hashed under another term key answer no lookup made now: read like threads not indexed yet
    term_key = {"term_key": term_key_fingerprint()}
    stale = {r["thread_id"] for r in conn.execute(SELECT_STALE, term_key | {"cap": DIRTY_SCAN_MAX + 1})}
    if len(stale | set(unindexed)) > DIRTY_SCAN_MAX:
        n = one(conn.execute(COUNT_STALE, term_key).fetchone())["n"]
        return Candidates(None, why_full=stale_reason(n), stale_count=n)
    found = [key for key in keys.values() if key is not None]  # all of them: none is missing
    lookups = found + sealed_keys(found, decryptor)
    hits = {r["thread_id"] for r in conn.execute(SELECT_HITS, {"keys": lookups})} if keys else set()
    unread = {r["thread_id"] for r in conn.execute(SELECT_UNANSWERED, {"key_set": decryptor.key_set})}
    return Candidates(
        frozenset(hits | set(unindexed) | stale | unread),
        len(hits),
        frozenset(set(unindexed) | stale),
        "",
        frozenset(unread),
        frozenset(hits),
        frozenset(stale),
        len(stale),
    )


def thread_token_hashes(
    conn: psycopg.Connection[DictRow], threads: Iterable[str], decryptor: formats.Decryptor | None = None
) -> dict[str, set[int]]:
    """Each thread's token hashes as the indexer would store them now (for threads it has not read yet; encrypted
    rows read with `decryptor`, default the configured keys); a thread without rows is absent."""
    decryptor = decryptor if decryptor is not None else formats.decryptor()
    with conn.transaction():  # the payloads are streamed by a server-side cursor (hashes kept in memory only)
        found = _thread_tokens(conn, sorted(set(threads)), IndexResult(), decryptor)
    return {thread: {token_hash(t) for t in tokens} for thread, tokens in found.items()}


# Per term, the indexed threads (but `exclude`) holding every token of it: counted in SQL, never listed.
# (`sealed` is each key as encrypted rows' tokens are stored, NULL without keys)
COUNT_HITS = """
SELECT q.term, count(t.thread_id) AS n
FROM unnest(%(terms)s::text[], %(keys)s::text[], %(sealed)s::text[]) AS q(term, key, sealed)
LEFT JOIN LATERAL (SELECT thread_id FROM core_thread_tokens
                   WHERE (tokens @> string_to_array(q.key, ',')::integer[]
                          OR tokens @> string_to_array(q.sealed, ',')::integer[])
                     AND NOT (thread_id = ANY(%(exclude)s))) t ON true
GROUP BY q.term"""


def count_hits(
    conn: psycopg.Connection[DictRow],
    terms: Iterable[str],
    exclude: Iterable[str],
    decryptor: formats.Decryptor | None = None,
) -> dict[str, int]:
    """How many indexed threads (but `exclude`) hold every token of each term, in plaintext rows or in encrypted
    rows read with the configured keys (a term without a token: 0)."""
    keys = lookup_keys(terms)
    if not keys:
        return {}
    decryptor = decryptor if decryptor is not None else formats.decryptor()
    sealed = [_sealed_key(k, decryptor) if decryptor else None for k in keys.values()]
    with _ours(conn) as ours:
        rows = ours.execute(
            COUNT_HITS,
            {"terms": list(keys), "keys": list(keys.values()), "sealed": sealed, "exclude": sorted(set(exclude))},
        ).fetchall()
    return {r["term"]: int(r["n"]) for r in rows}
