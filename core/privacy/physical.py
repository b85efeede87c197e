"""Physical erasure, measured and dated (issue 42 item 1): what is left of an erased value in PostgreSQL's files.

`erase()` proves zero rows by SQL (`t_sql_zero`). This module says what happens to the bytes after that, by reading
the server's files, and records it per erasure request in `core_erasure_physical` (migration 137).

Measured (scripts/physical_findings.py, 2026-12-05; embedded PostgreSQL 18.6 with its defaults: 8 kB pages, pglz TOAST
compression, wal_compression off, full_page_writes on, wal_keep_size 0, min_wal_size 80 MB, no archive, no slot).
A customer written by the retail agent through the real store and saver between four other customers (two before,
two after, so that the erased tuples sit between live ones): a phone and an address in store rows, in a checkpoint
blob of ~11.5 kB of incompressible text (stored out of line, uncompressed: TOASTed), in checkpoint_writes; the prefix
`clientes.<id>` in the store's and store_vectors' rows and keys. Then the real `erase()` (every evidence query 0).
After each step the files were read as bytes: "table" is the heap of the five agent tables, "TOAST" their TOAST
tables, "index" every index of the tables and of their TOAST tables, "WAL" every segment in pg_wal:

| step (cumulative)                                  | table                   | TOAST     | index          | WAL   |
|----------------------------------------------------|-------------------------|-----------|----------------|-------|
| 0. written, CHECKPOINT (the scan can find them)    | found                   | found     | found (prefix) | found |
| 1. erase(): SQL counts 0, no CHECKPOINT yet        | found                   | found     | found          | found |
| 2. + CHECKPOINT                                    | found                   | found     | found          | found |
| 3. + plain VACUUM (INDEX_CLEANUP ON, TRUNCATE false) | found                 | found     | found          | found |
| 4. + CHECKPOINT (3 and 4: the sweep's steps)       | found (not store_vectors) | found   | found (store)  | found |
| 5. + six more customers, VACUUM, CHECKPOINT        | not found (**)          | found (blobs) | not found  | found |
| 6. + 4 x (pg_switch_wal(), CHECKPOINT)             |                         |           |                | not found|
| copy of 2, VACUUM with its defaults (TRUNCATE on) + CHECKPOINT | found       | found     | found (store)  | found |
| copy of 2, VACUUM (FULL) + CHECKPOINT              | not found               | not found | not found      | found (*)|

(*) the rewrite itself wrote WAL holding the erased prefix again. (**) in one run of two a checkpoint_blobs heap
page still held the phone: reuse depends on where the new rows land. The copies: CREATE DATABASE ... TEMPLATE ...
STRATEGY FILE_COPY, a byte copy; the original never got a FULL.
A table holding only the erased customer is a different case: a default VACUUM truncates it to nothing and the
scan then finds nothing, which proves nothing about a real table, where the erased tuples have live neighbours.

What each step does, as measured:
- `DELETE` (erase()) stamps `xmax` on the tuples: the values stay byte for byte in heap and TOAST pages. Some pages
  change anyway: a read that finds a page full of dead tuples may prune it ("opportunistic pruning"), seen once on
  checkpoint_writes.
- `CHECKPOINT` alone writes the pages as they are (dead tuples included): it removes nothing. Without it the files
  lag shared buffers, so a scan is meaningful only right after one.
- plain `VACUUM` removes the dead tuples from the tables' line pointers and makes their space free for reuse; the
  bytes stayed in the heap, TOAST and B-tree pages (store_vectors' heap was the exception: after VACUUM and a
  CHECKPOINT its page no longer held the prefix, presumably compacted over it). New writes then reuse the space:
  after six more customers the store's heap and the indexes no longer held the values, a TOAST page of
  checkpoint_blobs still did (and in one run a checkpoint_blobs heap page). Hence the status 'in free space until
  reused or rewritten'.
  It needs no lock that stops the agents (SHARE UPDATE EXCLUSIVE); we pass TRUNCATE false (the truncation of empty
  trailing pages takes an ACCESS EXCLUSIVE lock, briefly) and INDEX_CLEANUP ON (with few dead tuples AUTO may skip the
  indexes, which keep pointing at the erased keys).
- `VACUUM (FULL)` (or CLUSTER) writes new files and unlinks the old ones: nothing left in the data directory's files
  (the old blocks become file-system free space, which no SQL and no scan here reads), but it holds ACCESS EXCLUSIVE on
  the table for its whole run: the agents' outage. Never run by the sweep; an operator's rewrite window.
- WAL: the inserts (and after each checkpoint, full-page images of the pages touched) carry the values in clear; no
  table step changes that. After four segment switches and checkpoints no segment in pg_wal held them any more (with
  wal_keep_size 0, no slot, no archive). A slot whose `restart_lsn` is before the erasure's end keeps that WAL; an
  archive keeps it for its retention; base backups copy the data files, free space included.

What this module does with that:
- `scan_files(db, values)` reads the files of every table `scanned_tables` names (heap, TOAST, indexes, every segment
  `.1`, `.2`...) and pg_wal as bytes: the agents' five, every table of ours `erase()` deletes from (it deletes the
  customer's rows of core_tool_calls, whose `args` hold recordar_preferencia's values, of the change follower's
  shadows...; a fixed list of the five let "overwritten" be claimed while their files held the values, issue 51) and
  every other table of the schema; only when the server's data directory is readable by this process and is the
  server's own (its pg_control holds the server's system identifier); otherwise every table is "unknown" with the
  reason: a managed or remote server is never reported as overwritten.
- `after_erasure_steps(db)` (the sweep job, never a page): plain VACUUM of each of those tables, then CHECKPOINT, each
  with its time or its error (VACUUM needs the owner or MAINTAIN, and a role without it gets a warning, not an error:
  recorded as not done; CHECKPOINT needs pg_checkpoint), PostgreSQL's dead tuples and last vacuum after it
  (pg_stat_user_tables), and the WAL settings, position, oldest segment and slots.
- `settle(db)`: the sweep's step after the re-check. The sweep runs later, in another process, and the register keeps
  no value (issue 43), so `erase()` keeps, while it holds the values, keyed needles (`needles_for`: per term, its byte
  length, a 16-bit head of its first bytes and a salted digest, both keyed with TERM_HASH_KEY; the id is looked for as
  its namespace prefix) and the WAL position at its end. The sweep finds them in raw bytes (no token boundaries: jsonb
  packs strings end to end), records per table and part which term references were found, and sets
  `t_files_overwritten` only when the files were measured after a CHECKPOINT, every table erase() deletes from was
  read, and no term was found in any table file (in the registers, KEPT_TABLES, which keep the customer's id and
  thread ids by design, only the values count); a term still found leaves it NULL with 'in free space until reused or
  rewritten' (retried by the next sweeps); a term too short to look for, a request erased before the needles existed,
  or a table erase() deletes from whose files were not read, gives 'not measured'.
- `t_wal_backup_horizon`: base backups copy the free space, so the values can enter a new backup until the files are
  overwritten: the horizon is `t_files_overwritten + BACKUP_RETENTION_DAYS` once both are known and no slot holds WAL
  from before the erasure's end; otherwise NULL with the reason. Whether pg_wal still holds them is recorded as
  scanned.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import psycopg
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from agent_memory_runtime import clock
from core.config import load_settings, term_hash_key
from core.db import Database, one
from core.privacy import evidence
from core.privacy import ours as ours_db
from core.privacy import residue as res

log = logging.getLogger(__name__)

AGENT_TABLES = ("store", "store_vectors", "checkpoints", "checkpoint_blobs", "checkpoint_writes")
READ_CHUNK = 4 << 20  # bytes read at once from a file (consecutive chunks overlap by the longest value)
WAL_MAX_BYTES = 256 << 20  # a larger pg_wal is not read (its part is then "not measured", with the size)
MAX_ATTEMPTS = 30  # sweeps that retry the steps of a request whose values are still in the files
OVERWRITTEN = "overwritten"
IN_FREE_SPACE = "in free space until reused or rewritten"
NOT_MEASURED = "not measured"

# The tables the sweep vacuums and scans (`scanned_tables`). A fixed list missed our own: erase() deletes from
# core_tool_calls (whose `args` hold recordar_preferencia's `valor`), the change follower's shadows, ... and their
# files kept the values while the register said "overwritten" (issue 51 item 2). Two rules, united, so that no table
# we or the agents write a customer's value into is left out:
# - every table erase() deletes from or rewrites (`erased_tables`: the agents' five, evidence.FIXED_QUERIES, and our
#   own, evidence.own_targets, which erase() itself calls): adding a table to the erasure adds it to the scan, in
#   whatever schema the agents' tables resolve to;
# - every ordinary table and materialized view of the schema, whatever its columns: a value can also sit where
#   erase() cannot delete it (a free-text column with no customer column, an old version of a row erase() redacted
#   by UPDATE, a copy made by a materialized view). No filter on column types: text, json and bytea are not the only
#   ones holding a value's bytes (tsvector, arrays, composite and domain types do too), and reading a table of numbers
#   costs only its size.
# Their TOAST tables and indexes come with each (SELECT_RELATIONS).
SELECT_SCHEMA_TABLES = """
SELECT c.oid::regclass::text AS table FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'm')
UNION
SELECT to_regclass(n)::text FROM unnest(%(named)s::text[]) AS n WHERE to_regclass(n) IS NOT NULL"""
SELECT_REGCLASS_NAMES = """
SELECT n AS name, to_regclass(n)::text AS table FROM unnest(%(named)s::text[]) WITH ORDINALITY AS x(n, i) ORDER BY i"""
# The proofs erase() keeps (evidence.PROTECTED_TABLES: the registers, the tombstones, the log of views) name the
# customer by design: their namespace prefix and thread ids in clear. There the scan looks for the values only; the id
# and the thread ids found there are not counted (`kept`), and the register says so.
KEPT_TABLES = evidence.PROTECTED_TABLES
# The files of a table: its heap, its TOAST table, the TOAST table's index, its own indexes.
SELECT_RELATIONS = """
WITH t AS (SELECT oid, reltoastrelid FROM pg_class WHERE oid = to_regclass(%(table)s))
SELECT 'table' AS part, t.oid::regclass::text AS relation, pg_relation_filepath(t.oid) AS path FROM t
UNION ALL
SELECT 'toast', t.reltoastrelid::regclass::text, pg_relation_filepath(t.reltoastrelid) FROM t WHERE t.reltoastrelid <> 0
UNION ALL
SELECT 'index', i.indexrelid::regclass::text, pg_relation_filepath(i.indexrelid)
FROM t JOIN pg_index i ON i.indrelid = t.oid OR (t.reltoastrelid <> 0 AND i.indrelid = t.reltoastrelid)
ORDER BY part, relation"""
SELECT_SERVER = """
SELECT current_setting('data_directory') AS data_directory, (SELECT system_identifier FROM pg_control_system()) AS id"""
SELECT_TABLE_STATS = """
SELECT relname AS table, n_live_tup AS live_tuples, n_dead_tup AS dead_tuples, last_vacuum, last_autovacuum,
       vacuum_count, autovacuum_count
FROM pg_stat_user_tables WHERE relid = to_regclass(%s)"""
WAL_SETTINGS = (
    "wal_keep_size",
    "max_slot_wal_keep_size",
    "max_wal_size",
    "min_wal_size",
    "wal_level",
    "wal_recycle",
    "archive_mode",
    "archive_command",
    "archive_library",
    "archive_timeout",
    "full_page_writes",
    "wal_compression",
)
SELECT_SETTINGS = "SELECT name, setting, unit FROM pg_settings WHERE name = ANY(%s) ORDER BY name"
SELECT_SLOTS = """
SELECT slot_name, slot_type, active, restart_lsn::text AS restart_lsn, wal_status
FROM pg_replication_slots ORDER BY slot_name"""
SELECT_WAL_POSITION = """
SELECT pg_current_wal_lsn()::text AS lsn, pg_walfile_name(pg_current_wal_lsn()) AS segment,
       (SELECT min(name) FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$') AS oldest_segment"""
WAL_NAME = re.compile(r"^[0-9A-F]{24}$")


# --- what is looked for ---------------------------------------------------------------------------


class Needles(Protocol):
    """What a scan looks for: `found(data)` names the values `data` holds; `span` bounds a value's length in bytes
    (consecutive chunks of a file overlap by it)."""

    span: int

    def found(self, data: bytes) -> set[str]: ...


class PlainValues:
    """Values known in clear (a test, the thread ids the register keeps anyway): label -> value, matched as UTF-8;
    labels get `prefix`."""

    def __init__(self, values: Mapping[str, str] | Sequence[str], prefix: str = ""):
        items = values.items() if isinstance(values, Mapping) else ((v, v) for v in values)
        self.values = {prefix + label: value.encode("utf-8") for label, value in items if value}
        self.span = max((len(v) for v in self.values.values()), default=1)

    def found(self, data: bytes) -> set[str]:
        return {label for label, value in self.values.items() if value in data}


WINDOW = 6  # bytes a needle's head covers: the shortest value looked for in the files (three pairs, _pair_terms)
HEAD_BITS = 0xFFFF  # a head keeps 16 bits of a keyed hash: a prefilter, confirmed by the needle's digest
PRIME = 2_147_483_647
NEEDLE_PERSON = b"physical-file"


def _coefficients(key: bytes) -> np.ndarray:
    """The head's polynomial coefficients, derived from TERM_HASH_KEY: without the key a head tells nothing."""
    return np.array(
        [
            int.from_bytes(hashlib.blake2b(bytes([j]), key=key, person=b"physical-coef", digest_size=4).digest())
            % PRIME
            for j in range(WINDOW)
        ],
        dtype=np.int64,
    )


@functools.lru_cache(maxsize=4)
def _pair_terms(key: bytes) -> tuple[np.ndarray, ...]:
    """The head's polynomial read two bytes at a time: for each pair of coefficients (a, b) and each 16-bit little-
    endian pair of bytes (lo, hi), (a * lo + b * hi) mod PRIME. A head is then three lookups and a sum."""
    coefficients = _coefficients(key)
    pairs = np.arange(1 << 16, dtype=np.int64)
    low, high = pairs & 0xFF, pairs >> 8
    return tuple((coefficients[j] * low + coefficients[j + 1] * high) % PRIME for j in range(0, WINDOW, 2))


HEADS_AT_ONCE = 1 << 16  # windows whose heads are computed together: small enough for the CPU's caches (the whole
# scan 1.8x faster than six multiplications and a modulo per byte over 4 MB at once: bench/bench_physical_scan.py)


def _head_chunks(data: bytes) -> Iterator[tuple[int, np.ndarray]]:
    """(offset, heads) for the keyed head of every WINDOW-byte window of `data`, HEADS_AT_ONCE windows at a time:
    sum over j of coefficient[j] * data[i + j], mod PRIME, its low 16 bits."""
    n = len(data) - WINDOW + 1
    if n <= 0:
        return
    first, second, third = _pair_terms(term_hash_key())
    raw = np.frombuffer(data, dtype=np.uint8)
    pairs = raw[:-1].astype(np.uint16) | (raw[1:].astype(np.uint16) << 8)  # pairs[i] = data[i] + data[i + 1] << 8
    for start in range(0, n, HEADS_AT_ONCE):
        stop = min(n, start + HEADS_AT_ONCE)
        acc = first[pairs[start:stop]]
        acc += second[pairs[start + 2 : stop + 2]]
        acc += third[pairs[start + 4 : stop + 4]]
        acc -= PRIME * (acc >= PRIME)  # three terms under PRIME each: two subtractions at most
        acc -= PRIME * (acc >= PRIME)
        yield start, acc & HEAD_BITS


def _heads(data: bytes) -> np.ndarray:
    """The keyed head of every WINDOW-byte window of `data`."""
    chunks = [heads for _, heads in _head_chunks(data)]
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)


def needle_digest(salt: bytes, raw: bytes) -> str:
    return hashlib.blake2b(raw, key=term_hash_key(), salt=salt, person=NEEDLE_PERSON, digest_size=16).hexdigest()


def needles_for(prefix: str, terms: Iterable[tuple[str, res.Term]], salt: str) -> list[dict[str, Any]]:
    """What `erase()` keeps, in its own process while it holds the values, so that a later sweep can look for them in
    the files without them: per distinctive term (its register reference), the byte length of its UTF-8 text, a 16-bit
    keyed head of its first WINDOW bytes and its keyed, salted digest. The customer's id is looked for as their
    namespace prefix (`clientes.<id>`: an id alone is too short to tell from unrelated bytes; an id that begins
    another's, C9 and C9x, is then found in the other's live rows: reported found, never a false "overwritten"). A
    term shorter than WINDOW bytes gets no head: it is listed as not looked for."""
    out = []
    key = bytes.fromhex(salt)
    for ref, term in terms:
        raw = (prefix if term.kind == "id" else term.term).encode("utf-8")
        if len(raw) < WINDOW:
            out.append({"ref": ref, "bytes": len(raw), "head": None, "digest": None})
            continue
        out.append(
            {"ref": ref, "bytes": len(raw), "head": int(_heads(raw[:WINDOW])[0]), "digest": needle_digest(key, raw)}
        )
    return out


class KeyedNeedles:
    """Erasure requests' values known only by `needles_for`'s keyed heads and digests (the register keeps no value,
    issue 43): every window of the data whose head matches is confirmed by the digest of the bytes from there. Raw
    bytes, no token boundaries: a value packed against its neighbours (jsonb packs its strings end to end) is found.
    `groups`: (label prefix, salt, needles) per request; labels are `<prefix><ref>`."""

    def __init__(self, groups: Iterable[tuple[str, str, Iterable[Mapping[str, Any]]]]):
        self.by_head: dict[int, list[tuple[str, bytes, int, str]]] = {}
        self.unlocatable: list[str] = []
        for label, salt, needles in groups:
            for n in needles:
                if n.get("head") is None:
                    self.unlocatable.append(label + n["ref"])
                else:
                    entry = (label + n["ref"], bytes.fromhex(salt), int(n["bytes"]), n["digest"])
                    self.by_head.setdefault(int(n["head"]), []).append(entry)
        self.wanted = np.zeros(HEAD_BITS + 1, dtype=bool)  # one flag per head value: a lookup, not a search
        self.wanted[list(self.by_head)] = True
        self.span = max((e[2] for es in self.by_head.values() for e in es), default=1)

    def found(self, data: bytes) -> set[str]:
        out: set[str] = set()
        if not self.by_head:
            return out
        # needle_digest's hash keyed and salted once per salt, copied at each window whose head matches (a head is 16
        # bits: a scan confirms millions of windows, and the keyed setup was half of each digest's time)
        key = term_hash_key()
        keyed: dict[bytes, Any] = {}
        for start, heads in _head_chunks(data):
            hits = np.nonzero(self.wanted[heads])[0]
            for pos, head in zip((hits + start).tolist(), heads[hits].tolist(), strict=True):
                for label, salt, size, digest in self.by_head[head]:
                    if label in out:
                        continue
                    base = keyed.get(salt)
                    if base is None:
                        base = keyed[salt] = hashlib.blake2b(key=key, salt=salt, person=NEEDLE_PERSON, digest_size=16)
                    h = base.copy()
                    h.update(data[pos : pos + size])
                    if h.hexdigest() == digest:
                        out.add(label)
        return out


class AllOf:
    """Several needles scanned in one read of each file."""

    def __init__(self, parts: Iterable[Needles]):
        self.parts = list(parts)
        self.span = max((p.span for p in self.parts), default=1)

    def found(self, data: bytes) -> set[str]:
        return set().union(*(p.found(data) for p in self.parts))


# --- scanning the files ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RelationScan:
    """One relation's files (or the WAL segments) as read: `found` the labels of the values they hold; `files` the
    paths (relative to the data directory) read, `found_in` those holding a value."""

    table: str  # a scanned table (scanned_tables), or "pg_wal"
    part: str  # table / toast / index / wal
    relation: str
    files: tuple[str, ...]
    bytes_read: int
    found: tuple[str, ...]
    found_in: tuple[str, ...] = ()


@dataclass
class FileScan:
    """`status` measured (every file read) or unknown (`reason`: why the files could not be read)."""

    status: str
    reason: str | None
    data_directory: str | None
    scanned_at: datetime
    relations: list[RelationScan] = field(default_factory=list)
    wal: RelationScan | None = None
    wal_reason: str | None = None  # why pg_wal was not read, when measured tables but not the WAL
    unlocatable: tuple[str, ...] = ()  # labels of values that cannot be looked for (see KeyedNeedles)
    tables: tuple[str, ...] = ()  # the tables whose files were (to be) read
    kept: tuple[str, ...] = ()  # labels not counted in KEPT_TABLES, which hold them by design

    @property
    def measured(self) -> bool:
        return self.status == "measured"

    def by_table(self) -> dict[str, dict[str, Any]]:
        """Per table: `found` (True, False, or None when not measured), the files read, what was found where."""
        out: dict[str, dict[str, Any]] = {}
        for r in self.relations:
            row = out.setdefault(r.table, {"found": False, "files": [], "values": [], "parts": {}})
            row["files"] += list(r.files)
            row["values"] = sorted(set(row["values"]) | set(r.found))
            part = row["parts"].setdefault(r.part, [])
            part += [v for v in r.found if v not in part]
            row["found"] = row["found"] or bool(r.found)
        if not self.measured:
            out = {
                t: {"found": None, "files": [], "values": [], "parts": {}, "reason": self.reason}
                for t in self.tables or AGENT_TABLES
            }
        return out

    def found_in_tables(self) -> set[str]:
        return {v for r in self.relations for v in r.found}

    def found_in_wal(self) -> set[str]:
        return set(self.wal.found) if self.wal else set()

    def to_json(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self), default=str))


def relation_segments(path: Path) -> list[Path]:
    """A relation's main fork and its segments `.1`, `.2`, ... (1 GB each)."""
    files: list[Path] = []
    n = 0
    while True:
        p = path if n == 0 else path.with_name(f"{path.name}.{n}")
        if not p.exists():
            return files
        files.append(p)
        n += 1


def scan_file(path: Path, needles: Needles) -> tuple[int, set[str]]:
    found: set[str] = set()
    size = 0
    overlap = max(needles.span - 1, 0)
    tail = b""
    with path.open("rb") as fh:
        while True:
            chunk = fh.read(READ_CHUNK)
            if not chunk:
                return size, found
            size += len(chunk)
            found |= needles.found(tail + chunk)
            tail = chunk[-overlap:] if overlap else b""


def _data_directory(conn: psycopg.Connection[DictRow]) -> tuple[Path | None, str | None]:
    """The server's data directory when this process can read it and it is this server's own, else the reason."""
    try:
        row = one(conn.execute(SELECT_SERVER).fetchone())
    except psycopg.Error as exc:
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            conn.rollback()
        return None, f"the server does not tell its data directory to this role ({type(exc).__name__}: {exc})".strip()
    data_dir = Path(row["data_directory"])
    control = data_dir / "global" / "pg_control"
    try:
        head = control.read_bytes()[:8]
    except OSError as exc:
        return None, f"the data directory {data_dir} is not readable by this process ({exc.strerror or exc})"
    if int.from_bytes(head, "little") != int(row["id"]):
        return None, f"{data_dir} on this machine is not this server's data directory (another system identifier)"
    return data_dir, None


def _erased_names(conn: psycopg.Connection[DictRow]) -> tuple[list[str], list[str]]:
    """The tables erase() deletes from or rewrites rows of, by the same `evidence.own_targets` erase() runs (a
    JSON-array or redaction target names its table): (in the agents' database: their five, the evidence queries', and
    what of ours is there; in the dashboard's own database apart (PG_DASHBOARD): ours, else none)."""
    agents, mine_names = list(evidence.FIXED_QUERIES), list[str]()
    with ours_db.connect(conn) as mine:
        apart = ours_db.is_apart(conn, mine)
        targets = evidence.own_targets(conn, mine)
    for target in targets:
        table = target.name.removeprefix(evidence.AGENTS_COPY).split(".", 1)[0]
        names = mine_names if apart and target.ours else agents
        if table not in names:
            names.append(table)
    return agents, mine_names


def _regclass_names(conn: psycopg.Connection[DictRow], names: list[str]) -> list[str]:
    # as regclass text, the form scanned_tables gives (a missing table keeps its name: never read, never "clean")
    rows = conn.execute(SELECT_REGCLASS_NAMES, {"named": names}).fetchall()
    return [r["table"] or r["name"] for r in rows]


def erased_tables(conn: psycopg.Connection[DictRow]) -> list[str]:
    """The tables erase() deletes from or rewrites rows of in the agents' database `conn` (their five and, where the
    dashboard's database is theirs, all of ours); ours apart: `erased_tables_ours`."""
    return _regclass_names(conn, _erased_names(conn)[0])


def erased_tables_ours(conn: psycopg.Connection[DictRow], ours: psycopg.Connection[DictRow]) -> list[str]:
    """The tables erase() deletes from or rewrites rows of in our database `ours`, apart from the agents' `conn`."""
    return _regclass_names(ours, _erased_names(conn)[1])


def scanned_tables(conn: psycopg.Connection[DictRow], erased: list[str] | None = None) -> list[str]:
    """What the sweep vacuums and scans (see SELECT_SCHEMA_TABLES): erase()'s tables (`erased`, default those of the
    agents' database `conn`) and every table and materialized view of the schema, as regclass text (a valid name in
    SQL); the agents' five first, then by name."""
    erased = erased_tables(conn) if erased is None else erased
    found = {r["table"] for r in conn.execute(SELECT_SCHEMA_TABLES, {"named": erased}).fetchall()}
    first = [t for t in AGENT_TABLES if t in found]
    return first + sorted(found - set(first))


def scan_files(
    db: Database,
    values: Needles | Mapping[str, str] | Sequence[str],
    tables: Sequence[str] | None = None,
    wal_max_bytes: int = WAL_MAX_BYTES,
    kept: Iterable[str] = (),
) -> FileScan:
    """Read the files of `tables` (default: `scanned_tables`; heap, TOAST, indexes, every segment) and the WAL
    segments as bytes and say which `values` each holds; in KEPT_TABLES the labels in `kept` (the customer's id and
    thread ids, which the registers keep by design) are not counted. Measured only when the data directory is
    readable here and is the server's own; otherwise status `unknown` with the reason, and nothing is claimed. A table
    created during the scan (default tables) was not read: `unknown` too. Call after a CHECKPOINT to see what the files
    hold rather than an older state (shared buffers are written to the files at checkpoints)."""
    needles: Needles = (
        PlainValues(values) if isinstance(values, (Mapping, list, tuple)) else values  # type: ignore[assignment]
    )
    unlocatable = tuple(getattr(needles, "unlocatable", ()))
    for part in getattr(needles, "parts", ()):
        unlocatable += tuple(getattr(part, "unlocatable", ()))
    kept = tuple(sorted(set(kept)))
    derived = tables is None
    with db.connection() as conn:
        tables = tuple(scanned_tables(conn) if tables is None else tables)
        data_dir, reason = _data_directory(conn)
        now = clock.now()
        if data_dir is None:
            return FileScan("unknown", reason, None, now, unlocatable=unlocatable, tables=tables, kept=kept)
        rels = [
            (t, r["part"], r["relation"], r["path"])
            for t in tables
            for r in conn.execute(SELECT_RELATIONS, {"table": t}).fetchall()
        ]
    scan = FileScan("measured", None, str(data_dir), now, unlocatable=unlocatable, tables=tables, kept=kept)

    def unknown(why: str) -> FileScan:
        return FileScan("unknown", why, str(data_dir), now, unlocatable=unlocatable, tables=tables, kept=kept)

    try:
        for table, part, relation, rel_path in rels:
            files = relation_segments(data_dir / rel_path) if rel_path else []
            if not files:  # never "not found" for a file that was not there to read
                raise FileNotFoundError(f"{relation}'s file {rel_path} is missing")
            found = _scan_relation(data_dir, table, part, relation, files, needles)
            if table in KEPT_TABLES and kept:
                found = _without(found, kept)
            scan.relations.append(found)
        wal_dir = data_dir / "pg_wal"
        segments = sorted(p for p in wal_dir.iterdir() if WAL_NAME.match(p.name))
        size = sum(p.stat().st_size for p in segments)
        if size <= wal_max_bytes:
            scan.wal = _scan_relation(data_dir, "pg_wal", "wal", "pg_wal", segments, needles)
        else:
            scan.wal_reason = f"pg_wal holds {size >> 20} MB, more than the {wal_max_bytes >> 20} MB a scan reads"
    except OSError as exc:  # a file unlinked under the scan (a rewrite, a recycled segment) or unreadable
        return unknown(f"a file could not be read: {exc}")
    with db.connection() as conn:  # a table rewritten during the scan (VACUUM FULL, CLUSTER): its files were others
        after = [(t, r["path"]) for t in tables for r in conn.execute(SELECT_RELATIONS, {"table": t}).fetchall()]
        new = sorted(set(scanned_tables(conn)) - set(tables)) if derived else []
    if after != [(t, p) for t, _, _, p in rels]:
        return unknown("a table was rewritten during the scan: read again")
    if new:
        return unknown(f"table(s) created during the scan, not read: {', '.join(new)}")
    return scan


def _without(scan: RelationScan, kept: Iterable[str]) -> RelationScan:
    """A KEPT_TABLES relation's scan without the labels it holds by design."""
    found = tuple(v for v in scan.found if v not in set(kept))
    return RelationScan(
        scan.table, scan.part, scan.relation, scan.files, scan.bytes_read, found, scan.found_in if found else ()
    )


def _scan_relation(
    data_dir: Path, table: str, part: str, relation: str, files: list[Path], needles: Needles
) -> RelationScan:
    found: set[str] = set()
    found_in: list[str] = []
    size = 0
    for f in files:
        n, hit = scan_file(f, needles)
        size += n
        if hit:
            found |= hit
            found_in.append(str(f.relative_to(data_dir)))
    return RelationScan(
        table, part, relation, tuple(str(f.relative_to(data_dir)) for f in files), size, tuple(sorted(found)),
        tuple(found_in),
    )  # fmt: skip


# --- the steps the sweep runs ---------------------------------------------------------------------


@dataclass
class Steps:
    """What `after_erasure_steps` did: per table the VACUUM (`done` or the error), when, and PostgreSQL's own
    figures after it; the CHECKPOINT; the WAL and backup horizons as configured and reported."""

    started_at: datetime
    finished_at: datetime | None = None
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    checkpoint: dict[str, Any] = field(default_factory=dict)
    wal: dict[str, Any] = field(default_factory=dict)
    backup_retention_days: int | None = None

    def to_json(self) -> dict[str, Any]:
        # its fields as they are: asdict() would deep-copy every table's report first, to the same JSON (no dataclass
        # inside), and that copy cost more than the JSON itself
        return json.loads(json.dumps({f.name: getattr(self, f.name) for f in fields(self)}, default=str))


# VERBOSE: VACUUM's own report of what it removed and what it could not (a snapshot still needing the rows). It is
# the measurement: pg_stat_user_tables' n_dead_tup is not, right after a VACUUM: another backend's pending counts (the
# erasure's own deletions among them) reach it up to 10 s later (PGSTAT_IDLE_INTERVAL) and are added to the 0 VACUUM
# set (measured here: 20 dead tuples shown for checkpoint_writes after a VACUUM whose report said 0 remained dead).
VACUUM = "VACUUM (VERBOSE, INDEX_CLEANUP ON, TRUNCATE false) {table}"
# In VACUUM VERBOSE's INFO "finished vacuuming" message (PostgreSQL 15+, English messages; other lc_messages: None)
_VACUUM_TUPLES = re.compile(r"tuples: (\d+) removed, (\d+) remain, (\d+) are dead but not yet removable")
_VACUUM_RELATION = re.compile(r'finished vacuuming "(?:[^"]*\.)?(pg_toast|[^".]+)\.[^".]+"')
_VACUUM_ITEMS = re.compile(r"had (\d+) dead item identifiers removed")


def vacuum_report(messages: Sequence[str]) -> dict[str, Any] | None:
    """The counts of VACUUM VERBOSE's "finished vacuuming" messages for a table and its TOAST table: tuples removed,
    remaining, dead but not yet removable, dead line pointers removed (pruned earlier by readers), per part. None
    when no message could be read (messages in another language)."""
    report: dict[str, Any] = {}
    for message in messages:
        relation, tuples = _VACUUM_RELATION.search(message), _VACUUM_TUPLES.search(message)
        if not (relation and tuples):
            continue
        items = _VACUUM_ITEMS.search(message)
        part = "toast" if relation.group(1) == "pg_toast" else "table"
        report[part] = {
            "removed": int(tuples.group(1)),
            "remain": int(tuples.group(2)),
            "dead_not_removable": int(tuples.group(3)),
            "dead_items_removed": int(items.group(1)) if items else None,
        }
    if not report:
        return None
    report["dead_not_removable"] = sum(p["dead_not_removable"] for p in report.values())
    return report


def _stats(conn: psycopg.Connection[DictRow], table: str) -> dict[str, Any]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(SELECT_TABLE_STATS, (table,)).fetchone()
    return {k: v for k, v in (row or {}).items() if k != "table"}


def lsn_int(lsn: str) -> int:
    """A pg_lsn's text `X/Y` as a number (comparable)."""
    high, low = lsn.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def slots_holding(wal: Mapping[str, Any], erased_lsn: str | None) -> list[str]:
    """The slots whose `restart_lsn` is at or before the erasure's end (`erased_lsn`; unknown: the position when the
    steps ran, which is later, so a slot is never missed): they keep WAL that may hold the values."""
    at = lsn_int(erased_lsn or wal.get("lsn") or "FFFFFFFF/FFFFFFFF")
    return [s["slot_name"] for s in wal.get("slots", ()) if s["restart_lsn"] and lsn_int(s["restart_lsn"]) <= at]


def wal_horizon(conn: psycopg.Connection[DictRow]) -> dict[str, Any]:
    """The WAL as the server reports it: the settings that keep it, the current position, the oldest segment still in
    pg_wal, the slots with their `restart_lsn`. A field the role may not read says so."""
    out: dict[str, Any] = {}
    out["settings"] = {
        r["name"]: (r["setting"] + (f" {r['unit']}" if r["unit"] else ""))
        for r in conn.execute(SELECT_SETTINGS, (list(WAL_SETTINGS),)).fetchall()
    }
    try:
        pos = one(conn.execute(SELECT_WAL_POSITION).fetchone())
        out |= {"lsn": pos["lsn"], "segment": pos["segment"], "oldest_segment": pos["oldest_segment"]}
    except psycopg.Error as exc:  # pg_ls_waldir needs pg_monitor; a standby has no current LSN
        out["position_unknown"] = f"{type(exc).__name__}: {exc}".strip()
    out["slots"] = [dict(r) for r in conn.execute(SELECT_SLOTS).fetchall()]
    archive = out["settings"].get("archive_mode", "off")
    out["verdict"] = (
        "archived segments are kept as long as the archive's retention (BACKUP_RETENTION_DAYS); "
        if archive not in ("off", "")
        else "no archive; "
    ) + (
        f"a segment leaves pg_wal at a checkpoint once it is older than the redo point by wal_keep_size="
        f"{out['settings'].get('wal_keep_size')} and no slot needs it"
    )
    return out


TABLE_EXISTS = "SELECT to_regclass(%s) IS NOT NULL AS ok"


def _vacuum(conn: psycopg.Connection[DictRow], table: str, notices: list[tuple[str, str]]) -> dict[str, Any]:
    """One table's VACUUM: done with its own report, or the error; a role that may not vacuum the table gets a
    WARNING ("permission denied to vacuum ..., skipping it"), not an error: recorded as not done."""
    entry: dict[str, Any] = {"step": VACUUM.format(table=table), "started_at": clock.now()}
    del notices[:]
    try:
        conn.execute(VACUUM.format(table=table))  # a regclass name from the catalog (scanned_tables), never input
        skipped = [m for severity, m in notices if severity == "WARNING" and "skipping" in m]
        entry |= {"done": not skipped} | ({"error": "; ".join(skipped)} if skipped else {})
        entry["report"] = vacuum_report([m for severity, m in notices if severity == "INFO"])
    except psycopg.Error as exc:
        entry |= {"done": False, "error": f"{type(exc).__name__}: {exc}".strip()}
    entry["finished_at"] = clock.now()
    entry["stats"] = _stats(conn, table)
    return entry


def after_erasure_steps(db: Database, tables: Sequence[str] | None = None) -> Steps:
    """Plain VACUUM (INDEX_CLEANUP ON, TRUNCATE false: no exclusive lock) of each table (default: `scanned_tables`,
    the agents' and ours), its TOAST table with it, then CHECKPOINT so that the files hold what VACUUM left; each with
    its time, or its error (not permitted to this role, ...). Run by the sweep job, never by a page: it reads and
    writes every page of the tables."""
    steps = Steps(clock.now(), backup_retention_days=load_settings().backup_retention_days)
    with db.connection() as conn:  # autocommit: VACUUM cannot run in a transaction block
        tables = scanned_tables(conn) if tables is None else tables
        notices: list[tuple[str, str]] = []

        def on_notice(diag: psycopg.errors.Diagnostic) -> None:
            if diag.severity_nonlocalized in ("WARNING", "INFO") and diag.message_primary:
                notices.append((diag.severity_nonlocalized, diag.message_primary))

        conn.add_notice_handler(on_notice)
        try:
            for table in tables:
                if one(conn.execute(TABLE_EXISTS, (table,)).fetchone())["ok"]:
                    steps.tables[table] = _vacuum(conn, table, notices)
        finally:
            conn.remove_notice_handler(on_notice)
        steps.checkpoint = {"step": "CHECKPOINT", "started_at": clock.now()}
        try:
            conn.execute("CHECKPOINT")
            steps.checkpoint["done"] = True
        except psycopg.Error as exc:  # needs superuser or pg_checkpoint
            steps.checkpoint |= {"done": False, "error": f"{type(exc).__name__}: {exc}".strip()}
        steps.checkpoint["finished_at"] = clock.now()
        steps.wal = wal_horizon(conn)
    steps.finished_at = clock.now()
    return steps


# --- per erasure request: the sweep's step --------------------------------------------------------

# Complete requests (SQL zero reached) not settled yet: never looked at, or still found in the files' free space
# (retried by every sweep until overwritten, at most MAX_ATTEMPTS times). A request "not measured" is not retried:
# what stopped the scan (no access to the files) does not change from one sweep to the next.
SELECT_UNSETTLED = """
SELECT r.id, r.finished_at, r.term_salt, r.thread_ids, r.namespace_prefix, r.last_recheck_clean, n.needles,
       n.erased_lsn::text AS erased_lsn
FROM core_erasure_register r LEFT JOIN core_erasure_physical p ON p.request_id = r.id
LEFT JOIN core_erasure_needles n ON n.request_id = r.id
WHERE r.status = 'complete' AND r.finished_at IS NOT NULL
  AND (p.request_id IS NULL OR (p.files_status = %(free)s AND p.attempts < %(max)s))
ORDER BY r.id"""
UPSERT_PHYSICAL = """
INSERT INTO core_erasure_physical (request_id, t_sql_zero, steps, files, files_status, files_note, t_files_overwritten,
                                   wal, backup_retention_days, t_wal_backup_horizon, horizon_note, first_steps_at,
                                   settled_at)
VALUES (%(id)s, %(t_sql_zero)s, %(steps)s, %(files)s, %(status)s, %(note)s, %(t_files)s, %(wal)s, %(retention)s,
        %(horizon)s, %(horizon_note)s, %(first)s, %(at)s)
ON CONFLICT (request_id) DO UPDATE SET
    steps = EXCLUDED.steps, files = EXCLUDED.files, files_status = EXCLUDED.files_status,
    files_note = EXCLUDED.files_note, t_files_overwritten = EXCLUDED.t_files_overwritten, wal = EXCLUDED.wal,
    backup_retention_days = EXCLUDED.backup_retention_days, t_wal_backup_horizon = EXCLUDED.t_wal_backup_horizon,
    horizon_note = EXCLUDED.horizon_note, settled_at = EXCLUDED.settled_at,
    attempts = core_erasure_physical.attempts + 1"""
# The agents' WAL position after an erasure's deletes, read on their primary and written in ours (issue 52: a value
# computed on one side and passed to the other as a parameter).
SELECT_WAL_INSERT_LSN = "SELECT pg_current_wal_insert_lsn()::text AS lsn"
SET_ERASED_LSN = "UPDATE core_erasure_needles SET erased_lsn = %(lsn)s::pg_lsn WHERE request_id = %(id)s"
INSERT_NEEDLES = "INSERT INTO core_erasure_needles (request_id, needles) VALUES (%(id)s, %(needles)s)"
SELECT_PHYSICAL = "SELECT * FROM core_erasure_physical WHERE request_id = %s"


@dataclass(frozen=True)
class Settled:
    """One request as recorded by `settle` (the row of core_erasure_physical)."""

    request_id: int
    files_status: str
    files_note: str | None
    t_sql_zero: datetime | None
    t_files_overwritten: datetime | None
    t_wal_backup_horizon: datetime | None
    horizon_note: str


class SettleSummary(list):
    """The requests settled by a sweep (a list of Settled); its text names request numbers only (the sweep log)."""

    def __str__(self) -> str:
        if not self:
            return "physical erasure: nothing to settle"
        counts: dict[str, list[str]] = {}
        for s in self:
            counts.setdefault(s.files_status, []).append(f"#{s.request_id}")
        return "physical erasure: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted(counts.items()))


def _request_files(scan: FileScan, prefix: str, erased: Sequence[str]) -> dict[str, Any]:
    """The scan as one request sees it: its references (prefix stripped) per table and part, and in pg_wal; the
    tables erase() deletes from (`erased`) that no file was read of; what KEPT_TABLES were not searched for."""

    def mine(found: Iterable[str]) -> list[str]:
        return sorted({v[len(prefix) :] for v in found if v.startswith(prefix)})

    tables: dict[str, dict[str, Any]] = {t: {"found": False, "parts": {}, "files": 0, "bytes": 0} for t in scan.tables}
    for r in scan.relations:
        row = tables.setdefault(r.table, {"found": False, "parts": {}, "files": 0, "bytes": 0})
        refs = mine(r.found)
        row["files"] += len(r.files)
        row["bytes"] += r.bytes_read
        if refs:
            row["found"] = True
            row["parts"][r.part] = sorted(set(row["parts"].get(r.part, [])) | set(refs))
    return {
        "status": scan.status,
        "reason": scan.reason,
        "scanned_at": scan.scanned_at.isoformat(),
        "tables": tables,
        "wal": {
            "measured": scan.wal is not None,
            "reason": scan.wal_reason if scan.measured else scan.reason,
            "segments": len(scan.wal.files) if scan.wal else 0,
            "found": mine(scan.wal.found) if scan.wal else [],
            "found_in": list(scan.wal.found_in) if scan.wal and mine(scan.wal.found) else [],
        },
        "unlocatable": mine(scan.unlocatable),
        "erased_tables": list(erased),
        "not_read": [t for t in erased if not tables.get(t, {}).get("files")] if scan.measured else [],
        "kept": {"tables": sorted(set(scan.tables) & KEPT_TABLES), "refs": mine(scan.kept)},
    }


def _files_verdict(
    scan: FileScan, files: dict[str, Any], located: int, steps: Steps
) -> tuple[str, str | None, datetime | None]:
    """(status, note, t_files_overwritten): overwritten only when measured after a CHECKPOINT, with every table
    erase() deletes from read (heap, TOAST, indexes), every term locatable and none found in any table file."""
    if not scan.measured:
        return NOT_MEASURED, f"files not measured: {scan.reason}", None
    if files["not_read"]:
        return NOT_MEASURED, f"no file read of table(s) erase() deletes from: {', '.join(files['not_read'])}", None
    if not steps.checkpoint.get("done"):
        return NOT_MEASURED, f"no CHECKPOINT ({steps.checkpoint.get('error')}): the files may lag shared buffers", None
    found = {t: row["parts"] for t, row in files["tables"].items() if row["found"]}
    if found:
        where = "; ".join(
            f"{t}: " + ", ".join(f"{part} {'/'.join(refs)}" for part, refs in parts.items())
            for t, parts in found.items()
        )
        return IN_FREE_SPACE, f"still in the files at {scan.scanned_at.isoformat()}: {where}", None
    if located < 0:
        return (
            NOT_MEASURED,
            "erased before the file needles were kept (migration 137): its values cannot be looked for",
            None,
        )
    if files["unlocatable"] or not located:
        missing = ", ".join(files["unlocatable"]) or "no term kept"
        return NOT_MEASURED, f"terms too short to look for in raw bytes ({missing}): absence is not proven", None
    return OVERWRITTEN, None, scan.scanned_at


def _horizon(
    status: str, t_files: datetime | None, retention: int | None, wal: dict[str, Any], held: list[str], files: dict
) -> tuple[datetime | None, str]:
    """The latest time the values can be in WAL or a backup: base backups copy the files (free space included) and
    archived WAL is kept as long as them, so: the files' overwrite time + BACKUP_RETENTION_DAYS, unless a slot holds
    WAL from before the erasure (then not bounded by time)."""
    in_wal = files["wal"]
    local = (
        f"; still in pg_wal at {files['scanned_at']} ({', '.join(in_wal['found_in'])})"
        if in_wal.get("found")
        else f"; found in no pg_wal segment at {files['scanned_at']}"
        if in_wal.get("measured")
        else "; pg_wal not measured"
    )
    if held:
        return None, "unknown: replication slot(s) " + ", ".join(held) + " hold WAL written before the erasure" + local
    if retention is None:
        return None, "unknown: BACKUP_RETENTION_DAYS is not configured" + local
    if status != OVERWRITTEN or t_files is None:
        return None, (
            f"open: base backups copy the files' free space, which is not measured overwritten; the horizon is the "
            f"overwrite time + {retention} days (BACKUP_RETENTION_DAYS)" + local
        )
    return t_files + timedelta(days=retention), (
        f"files overwritten at {t_files.isoformat()} + {retention} days (BACKUP_RETENTION_DAYS): base backups and "
        f"archived WAL taken until then are expired by this time; {wal.get('verdict', '')}" + local
    )


def settle(db: Database) -> SettleSummary:
    """The sweep's step after the erasure re-check: for each complete request not yet settled, the steps (once for
    all of them), a scan of the files for each request's terms by their keyed hashes, and its row in
    core_erasure_physical. Nothing to settle: nothing runs (no VACUUM, no CHECKPOINT). With the dashboard's database
    apart (PG_DASHBOARD), its files are vacuumed and scanned too (our targets live there): a request is overwritten
    only when both databases' files say so; the agents' copies of a table ours has too are named AGENTS_COPY + name."""
    ours = db.ours
    rows = ours.fetch(SELECT_UNSETTLED, {"free": IN_FREE_SPACE, "max": MAX_ATTEMPTS}, read_only=False)
    summary = SettleSummary()
    if not rows:
        return summary
    groups = []
    plain = []
    kept: list[str] = []
    located: dict[int, int] = {}
    for r in rows:
        needles, label = r["needles"], f"r{r['id']}:"
        located[r["id"]] = -1 if needles is None else sum(1 for n in needles if n.get("head") is not None)
        groups.append((label, r["term_salt"] or "00", needles or ()))
        # the thread ids: in the register in clear anyway (a re-check looks for them); in the checkpoint tables' keys
        threads = {f"thread{i}": t for i, t in enumerate(r["thread_ids"] or (), 1)}
        plain.append(PlainValues(threads, label))
        # what the registers keep by design (KEPT_TABLES): the thread ids, and the id's needle (its namespace prefix,
        # the register's namespace_prefix: known by its digest)
        prefix = needle_digest(bytes.fromhex(r["term_salt"] or "00"), r["namespace_prefix"].encode("utf-8"))
        kept += [label + t for t in threads] + [label + n["ref"] for n in needles or () if n.get("digest") == prefix]
    needles = AllOf([KeyedNeedles(groups), *plain])
    with db.connection() as conn:
        erased = erased_tables(conn)  # erase()'s own list: the scan below must have read every one of them
        apart = ours is not db
        mine_erased: list[str] = []
        mine_tables: list[str] = []
        if apart:
            with ours.connection() as mine:
                mine_erased = erased_tables_ours(conn, mine)
                mine_tables = scanned_tables(mine, mine_erased)
    steps = after_erasure_steps(db)
    scan = scan_files(db, needles, kept=kept)
    mine_steps = after_erasure_steps(ours, mine_tables) if apart else None
    mine_scan = scan_files(ours, needles, mine_tables, kept=kept) if apart else None
    # one report for every request settled here (each row stores the same): serialized once, not per request (a
    # backlog of requests retried in free space made it most of a sweep's CPU after the scan)
    steps_json = steps.to_json() | ({"dashboard_database": mine_steps.to_json()} if mine_steps else {})
    for r in rows:
        files = _request_files(scan, f"r{r['id']}:", erased)
        status, note, t_files = _files_verdict(scan, files, located[r["id"]], steps)
        if mine_scan is not None and mine_steps is not None:
            mine_files = _request_files(mine_scan, f"r{r['id']}:", mine_erased)
            mine_verdict = _files_verdict(mine_scan, mine_files, located[r["id"]], mine_steps)
            files = _both_files(files, mine_files, set(mine_scan.tables))
            status, note, t_files = _both_verdicts((status, note, t_files), mine_verdict)
        if status == IN_FREE_SPACE and r["last_recheck_clean"] is False:
            note = "the data came back by SQL (the last re-check found it): the bytes found may be live rows; " + (
                note or ""
            )
        held = slots_holding(steps.wal, r["erased_lsn"])
        wal = json.loads(json.dumps(steps.wal | {"erased_lsn": r["erased_lsn"], "slots_holding": held}, default=str))
        horizon, horizon_note = _horizon(status, t_files, steps.backup_retention_days, wal, held, files)
        ours.execute(
            UPSERT_PHYSICAL,
            {
                "id": r["id"],
                "t_sql_zero": r["finished_at"],
                "steps": Jsonb(steps_json),
                "files": Jsonb(files),
                "status": status,
                "note": note,
                "t_files": t_files,
                "wal": Jsonb(wal),
                "retention": steps.backup_retention_days,
                "horizon": horizon,
                "horizon_note": horizon_note,
                "first": steps.started_at,
                "at": clock.now(),
            },
        )
        summary.append(Settled(r["id"], status, note, r["finished_at"], t_files, horizon, horizon_note))
    return summary


def _both_files(agents: dict[str, Any], mine: dict[str, Any], mine_tables: set[str]) -> dict[str, Any]:
    """One request's files in both databases: ours' tables by their names, the agents' copy of a table ours has too
    as AGENTS_COPY + name; the dashboard's database's WAL (another server's, or the same pg_wal read again) apart."""

    def named(table: str) -> str:
        return evidence.AGENTS_COPY + table if table in mine_tables else table

    out = dict(agents)
    out["tables"] = {named(t): v for t, v in agents["tables"].items()} | mine["tables"]
    out["erased_tables"] = [named(t) for t in agents["erased_tables"]] + mine["erased_tables"]
    out["not_read"] = [named(t) for t in agents["not_read"]] + mine["not_read"]
    out["kept"] = {
        "tables": sorted({named(t) for t in agents["kept"]["tables"]} | set(mine["kept"]["tables"])),
        "refs": sorted(set(agents["kept"]["refs"]) | set(mine["kept"]["refs"])),
    }
    out["dashboard_database"] = {k: mine[k] for k in ("status", "reason", "scanned_at", "wal")}
    return out


def _both_verdicts(
    agents: tuple[str, str | None, datetime | None], mine: tuple[str, str | None, datetime | None]
) -> tuple[str, str | None, datetime | None]:
    """Overwritten only when both databases' files are; else the worse of the two, each note said with its side."""
    rank = {OVERWRITTEN: 0, IN_FREE_SPACE: 1, NOT_MEASURED: 2}
    if agents[0] == OVERWRITTEN and mine[0] == OVERWRITTEN:
        return OVERWRITTEN, None, max(t for t in (agents[2], mine[2]) if t is not None)
    status = max(agents[0], mine[0], key=lambda s: rank[s])
    notes = [f"{side}: {v[1]}" for side, v in (("agents' database", agents), ("dashboard's database", mine)) if v[1]]
    return status, "; ".join(notes) or None, None


def record(db: Database, request_id: int) -> dict[str, Any] | None:
    """The request's physical record as stored (None: not settled by any sweep yet)."""
    return db.ours.fetch_one(SELECT_PHYSICAL, (request_id,), read_only=False)


__all__ = [
    "AGENT_TABLES",
    "IN_FREE_SPACE",
    "NOT_MEASURED",
    "OVERWRITTEN",
    "AllOf",
    "FileScan",
    "KeyedNeedles",
    "needles_for",
    "PlainValues",
    "RelationScan",
    "SettleSummary",
    "Settled",
    "Steps",
    "after_erasure_steps",
    "record",
    "scan_files",
    "settle",
    "wal_horizon",
]
