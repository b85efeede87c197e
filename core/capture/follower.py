"""The change follower: reads the agents' committed changes from a logical slot (pgoutput, publication
`core_capture`, migration 140) and keeps our aggregates with them, instead of triggers on the agents' tables.

Exactly once: each batch is applied in one transaction together with the commit LSN it reached
(`core_capture_position`); the slot is advanced only after that commit. A restart skips every transaction whose
commit LSN is at or below the stored position (killed between commit and advance); a batch killed before its
commit is decoded again (the slot was not advanced).

A consistent start: when the follower creates its slot, the slot decodes every transaction that commits after
its consistent point. The aggregates are then recounted from the tables in a REPEATABLE READ snapshot taken after
that point; the snapshot is stored, and a decoded transaction visible in it (it committed between the slot's
creation and the snapshot: the recount saw it) is skipped. Nothing is counted twice or missed, with no lock on the
agents' tables.

Never stopped by one bad row (issue 51): a batch that fails on a row's data is applied again change by change,
each in a savepoint; a change that fails is a dead letter (core_capture_dead_letters, migration 152: its position,
table, key, error and the aggregates it touches, unknown until a recount), everything else is applied. A recount
(`request_recount`, done by the follower itself) clears them.

One applier per database: a session advisory lock (FOLLOWER_LOCK). `catch_up()` drains the slot up to the WAL
written before it was called: itself when no follower runs, else by waiting for the running one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg

from core.capture import changes
from core.capture.changes import Contribution, Deltas
from core.db import dashboard_dsn_for, decode_dsn_for, server_key

log = logging.getLogger(__name__)

PUBLICATION = "core_capture"
# pg_try_advisory_lock key of the one follower per database ("capt" "foll").
FOLLOWER_LOCK = 0x63617074_666F6C6C & 0x7FFFFFFFFFFFFFFF
# Test hooks: pause (sleep long) at a named point so a test can SIGKILL the process there.
PAUSE_ENV = "CORE_CAPTURE_PAUSE_AT"  # "after_apply" (committed, slot not advanced) | "mid_batch" (inside the txn)
IDLE_SLEEP_S = 0.5  # between two reads that found nothing (bench/bench_capture.py: what polling costs)
HEARTBEAT_S = 1.0  # when idle, `caught_up_at` is written at most this often (the pages' lag)
# Every read of the slot (the peek, then pg_replication_slot_advance) decodes the WAL from its restart_lsn, which
# moves only past a running-transactions record: the bgwriter writes one every 15 s, so each poll decoded up to 15 s
# of the agents' WAL again, twice. After a batch that applied the agents' changes the follower writes one itself
# (pg_log_standby_snapshot, at most every SNAPSHOT_S): measured while an agent wrote ~200 documents/s, the WAL from
# restart_lsn to the end went from 1,442 KB to 149 KB median, and the follower's backend CPU by a fifth
# (bench/bench_follower_cpu.py).
SNAPSHOT_S = 1.0
PUBLICATION_CHECK_S = 5.0  # a running follower checks the publication this often (setup checks it each time)
_SNAPSHOT_REFUSED: set[str] = set()  # DSNs whose role may not (said once a process, not at every page's catch-up)


class CaptureNotAllowed(RuntimeError):
    """Logical decoding cannot be set up here; the message says what is missing."""


class SlotLostInRecount(CaptureNotAllowed):
    """The slot was invalidated (max_slot_wal_keep_size) before the follower caught up after creating it and
    recounting: recreating it would recount and lose it again, so the follower stops and says how much WAL it
    needed (the message) instead."""


class CaptureTimeout(RuntimeError):
    """The follower did not reach the WAL position asked for within the time given."""


class SlotTaken(CaptureTimeout):
    """Another consumer reads the follower's slot (the message names it). What it confirmed never reaches the
    aggregates: the follower forgets its position, and once the slot is free it recreates it and recounts."""


# Who else reads the slot: every connection of ours says application_name core_capture* (connect() below).
SELECT_OTHER_CONSUMER = """
SELECT s.active_pid, a.application_name, a.usename::text, a.client_addr::text
FROM pg_replication_slots s LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid
WHERE s.slot_name = %s AND s.active_pid IS NOT NULL AND s.active_pid <> pg_backend_pid()
  AND coalesce(a.application_name, '') NOT LIKE 'core\\_capture%%'"""


def other_consumer(conn: psycopg.Connection, slot: str) -> str | None:
    """Who reads `slot` besides us (pid, application, role, client), or None."""
    row = conn.execute(SELECT_OTHER_CONSUMER, (slot,)).fetchone()
    if row is None:
        return None
    pid, app, user, client = row
    return f"pid {pid}, application {app or '?'!r}, role {user or '?'}, client {client or 'local'}"


def _slot_taken(links: Links, slot: str, who: str | None) -> SlotTaken:
    """Forget the position (setup then recreates the slot and recounts, once it is free) and say who took it."""
    links.ours.execute("DELETE FROM core_capture_position WHERE slot_name = %s", (slot,))
    return SlotTaken(
        f"replication slot {slot} is read by another consumer ({who or 'gone since'}): the changes it confirms never "
        "reach the dashboard's figures; stop it (or give it a slot of its own). The follower then recreates its slot "
        "and recounts from the tables"
    )


def slot_name_for(dbname: str) -> str:
    """Slots are cluster-wide: one per database, named after it."""
    return ("core_capture_" + re.sub(r"[^a-z0-9_]", "_", dbname.lower()))[:63]


def one_row(cur: psycopg.Cursor) -> tuple:
    """The one row a statement returns."""
    row = cur.fetchone()
    assert row is not None
    return tuple(row)


def lsn_int(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def lsn_text(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def _pause(point: str) -> None:
    if os.environ.get(PAUSE_ENV) == point:
        marker = os.environ.get(PAUSE_ENV + "_FILE")
        if marker:
            with open(marker, "w") as f:
                f.write(point)
        time.sleep(3600)


@dataclass(frozen=True)
class Snapshot:
    """A pg_snapshot (xmin:xmax:xip,...) and whether a 32-bit xid from pgoutput's Begin is visible in it."""

    xmin: int
    xmax: int
    xip: frozenset[int]

    @classmethod
    def parse(cls, text: str) -> Snapshot:
        xmin, xmax, xip = text.split(":")
        return cls(int(xmin), int(xmax), frozenset(int(x) for x in xip.split(",") if x))

    def visible(self, xid: int) -> bool:
        full = (self.xmax & ~0xFFFFFFFF) | xid  # widen near xmax (the xids decoded here are within 2^31 of it)
        if full > self.xmax + (1 << 31):
            full -= 1 << 32
        elif full < self.xmax - (1 << 31):
            full += 1 << 32
        return full < self.xmin or (full < self.xmax and full not in self.xip)


@dataclass
class BatchResult:
    transactions: int  # applied now
    changes: int
    position: int | None
    drained: bool  # the read found everything up to the WAL flushed before it
    caught_up: int | None = None  # then: every change written before this LSN is applied,
    caught_up_at: str | None = None  # that is, before this time


# --- SQL ------------------------------------------------------------------------------------------------------

SELECT_POSITION = """
SELECT lsn::text, recount_snapshot::text AS snapshot, recount_lsn::text,
       EXISTS (SELECT 1 FROM core_capture_recount_requests r WHERE r.slot_name = p.slot_name) AS recount_requested
FROM core_capture_position p WHERE slot_name = %s"""
RECORD_DEAD_LETTER = """
INSERT INTO core_capture_dead_letters (slot_name, lsn, xid, table_name, row_key, error, unknown)
VALUES (%s, %s::pg_lsn, %s, %s, %s, %s, %s)"""
RESOLVE_DEAD_LETTERS = "UPDATE core_capture_dead_letters SET recounted_at = now() WHERE recounted_at IS NULL"
REQUEST_RECOUNT = """
INSERT INTO core_capture_recount_requests (slot_name) VALUES (%s)
ON CONFLICT (slot_name) DO UPDATE SET requested_at = now()"""
DROP_RECOUNT_REQUEST = "DELETE FROM core_capture_recount_requests WHERE slot_name = %s"

# The batch is consumed as it is read (decoded once: a peek, then pg_replication_slot_advance, decoded it twice, a
# fifth of the agents' primary's CPU under load when decoding there, issue 52). The slot then confirms it before our
# transaction commits: every read starts by comparing the slot's confirmed position with the one saved with the last
# batch, and a slot ahead of it (a stop or an error between a read and its commit) is recounted from the tables.
GET = """
WITH batch AS MATERIALIZED (
    SELECT (lsn - '0/0'::pg_lsn)::int8 AS lsn, data FROM pg_logical_slot_get_binary_changes(%(slot)s, NULL, %(n)s,
        'proto_version', '1', 'publication_names', %(publication)s))
SELECT lsn, data FROM batch
UNION ALL  -- then, in the same round trip, where the read left the slot (the last row, no data)
SELECT (confirmed_flush_lsn - '0/0'::pg_lsn)::int8, NULL FROM pg_replication_slots WHERE slot_name = %(slot)s"""
SELECT_CONFIRMED = "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s"
# A customer's document's back-link to the conversation that wrote it (the memory article's tool writes `hilo`).
HILO_OF = "CASE WHEN jsonb_typeof({value} -> 'hilo') = 'string' THEN {value} ->> 'hilo' END"
SELECT_SHADOW = """
SELECT s.prefix, s.key, s.expires_day::text, s.value_hashes, s.hilo FROM core_store_shadow s
JOIN unnest(%s::text[], %s::text[]) AS k(prefix, key) USING (prefix, key)"""
# The hashes core_value_holders_of gives a document (one per distinct string leaf), and its `hilo` link.
SELECT_DERIVED = f"""
SELECT u.v, ARRAY(SELECT hashtextextended(l, 0) FROM core_string_leaves(u.v::jsonb) AS l) AS hashes,
       {HILO_OF.format(value="u.v::jsonb")} AS hilo
FROM unnest(%s::text[]) AS u(v)"""
# A moved document's value as its row holds it now (changes.reread_keys), read where the slot is read.
SELECT_REREAD = """
SELECT s.prefix, s.key, s.value::text
FROM store s JOIN unnest(%s::text[], %s::text[]) AS k(prefix, key) USING (prefix, key)"""
SELECT_PREFIX_DOCUMENTS = "SELECT prefix, documents FROM core_prefix_counts WHERE prefix = ANY(%s)"
# Each upsert below writes a whole batch in one statement (arrays, one row per element): row by row (executemany),
# applying was half of the follower's server CPU (bench/bench_follower_cpu.py).
UPSERT_PREFIX = """
INSERT INTO core_prefix_counts AS c (prefix, documents, last_write)
SELECT * FROM unnest(%s::text[], %s::bigint[], %s::timestamptz[])
ON CONFLICT (prefix) DO UPDATE SET documents = EXCLUDED.documents,
    last_write = GREATEST(c.last_write, EXCLUDED.last_write)"""
DELETE_PREFIX = "DELETE FROM core_prefix_counts WHERE prefix = ANY(%s)"
UPSERT_ROOT = """
INSERT INTO core_root_counts AS r (root, shard, documents, namespaces, vectors)
SELECT root, 0, d, n, v FROM unnest(%s::text[], %s::bigint[], %s::bigint[], %s::bigint[]) AS u(root, d, n, v)
ON CONFLICT (root, shard) DO UPDATE SET documents = r.documents + EXCLUDED.documents,
    namespaces = r.namespaces + EXCLUDED.namespaces, vectors = r.vectors + EXCLUDED.vectors"""
UPSERT_EXPIRY = """
INSERT INTO core_expiry_days AS d (day, root, documents)
SELECT * FROM unnest(%s::date[], %s::text[], %s::bigint[])
ON CONFLICT (day, root) DO UPDATE SET documents = d.documents + EXCLUDED.documents"""
UPSERT_HOLDERS = """
INSERT INTO core_value_holders AS h (value_hash, cliente_id, documents)
SELECT * FROM unnest(%s::bigint[], %s::text[], %s::bigint[])
ON CONFLICT (value_hash, cliente_id) DO UPDATE SET documents = h.documents + EXCLUDED.documents"""
DROP_EMPTY_HOLDERS = """
DELETE FROM core_value_holders h USING unnest(%s::bigint[], %s::text[]) AS z(value_hash, cliente_id)
WHERE h.value_hash = z.value_hash AND h.cliente_id = z.cliente_id AND h.documents <= 0"""
UPSERT_SHADOW = """
INSERT INTO core_store_shadow (prefix, key, expires_day, value_hashes, hilo)
SELECT p, k, d, h::bigint[], l
FROM unnest(%s::text[], %s::text[], %s::date[], %s::text[], %s::text[]) AS u(p, k, d, h, l)
ON CONFLICT (prefix, key) DO UPDATE SET expires_day = EXCLUDED.expires_day, value_hashes = EXCLUDED.value_hashes,
    hilo = EXCLUDED.hilo"""
DELETE_SHADOW = """
DELETE FROM core_store_shadow s USING unnest(%s::text[], %s::text[]) AS k(prefix, key)
WHERE s.prefix = k.prefix AND s.key = k.key"""
# Each checkpoint's key, the subjects its metadata names (core_metadata_subjects, migration 144) and its `ts`, by key.
# `ts` is inside the checkpoint payload, which the publication leaves out: read from the row by its primary key as it
# is now where the slot is read (a later change of the row is later in the stream; a row deleted since is deleted by
# a later batch), then written in ours with the metadata the stream carried.
SELECT_CHECKPOINT_TS = """
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.checkpoint ->> 'ts'
FROM checkpoints c JOIN unnest(%s::text[], %s::text[], %s::text[]) AS k(t, ns, id)
    ON c.thread_id = k.t AND c.checkpoint_ns = k.ns AND c.checkpoint_id = k.id"""
# A checkpoint rewritten with its TOASTed metadata unchanged (not in the stream): both read from the row.
SELECT_CHECKPOINT_ROWS = """
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.metadata::text, c.checkpoint ->> 'ts'
FROM checkpoints c JOIN unnest(%s::text[], %s::text[], %s::text[]) AS k(t, ns, id)
    ON c.thread_id = k.t AND c.checkpoint_ns = k.ns AND c.checkpoint_id = k.id"""
UPSERT_CHECKPOINTS = """
INSERT INTO core_checkpoint_shadow (thread_id, checkpoint_ns, checkpoint_id, subjects, ts)
SELECT k.t, k.ns, k.id, core_metadata_subjects(k.m::jsonb), k.ts
FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[]) AS k(t, ns, id, m, ts)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET subjects = EXCLUDED.subjects, ts = EXCLUDED.ts"""
DELETE_CHECKPOINTS = """
DELETE FROM core_checkpoint_shadow s USING unnest(%s::text[], %s::text[], %s::text[]) AS k(t, ns, id)
WHERE s.thread_id = k.t AND s.checkpoint_ns = k.ns AND s.checkpoint_id = k.id"""
# The agents' own logs mirrored in ours (changes.MIRRORED, issue 52 A'): each batch's final rows upserted or deleted by
# key; a row the stream sent without a column (TOASTed, unchanged) read by key where the slot is read, as it is now.
UPSERT_CONVERSATIONS = """
INSERT INTO core_conversations (thread_id, agent, subject_root, subject_id, started_at, last_turn_at, turns)
SELECT t, a, r, i, s::timestamptz, l::timestamptz, n::integer
FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[])
    AS u(t, a, r, i, s, l, n)
ON CONFLICT (thread_id) DO UPDATE SET agent = EXCLUDED.agent, subject_root = EXCLUDED.subject_root,
    subject_id = EXCLUDED.subject_id, started_at = EXCLUDED.started_at, last_turn_at = EXCLUDED.last_turn_at,
    turns = EXCLUDED.turns"""
DELETE_CONVERSATIONS = "DELETE FROM core_conversations WHERE thread_id = ANY(%s::text[])"
SELECT_CONVERSATION_ROWS = """
SELECT thread_id, agent, subject_root, subject_id, started_at::text, last_turn_at::text, turns::text
FROM core_conversations WHERE thread_id = ANY(%s::text[])"""
UPSERT_MEMORY_WRITES = """
INSERT INTO core_memory_writes (id, written_at, prefix, key, thread_id, agent)
SELECT i::bigint, w::timestamptz, p, k, t, a
FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[]) AS u(i, w, p, k, t, a)
ON CONFLICT (id) DO UPDATE SET written_at = EXCLUDED.written_at, prefix = EXCLUDED.prefix, key = EXCLUDED.key,
    thread_id = EXCLUDED.thread_id, agent = EXCLUDED.agent"""
DELETE_MEMORY_WRITES = "DELETE FROM core_memory_writes WHERE id = ANY(%s::text[]::bigint[])"
SELECT_MEMORY_WRITE_ROWS = """
SELECT id::text, written_at::text, prefix, key, thread_id, agent FROM core_memory_writes
WHERE id = ANY(%s::text[]::bigint[])"""
# table -> (upsert, delete by key, read by key where the slot is read)
MIRROR_SQL = {
    "core_conversations": (UPSERT_CONVERSATIONS, DELETE_CONVERSATIONS, SELECT_CONVERSATION_ROWS),
    "core_memory_writes": (UPSERT_MEMORY_WRITES, DELETE_MEMORY_WRITES, SELECT_MEMORY_WRITE_ROWS),
}
MARK_THREADS = """
INSERT INTO core_token_dirty AS d (thread_id) SELECT unnest(%s::text[]) ORDER BY 1
ON CONFLICT (thread_id) DO UPDATE SET claimed_at = NULL WHERE d.claimed_at IS NOT NULL"""
TRUNCATE_STORE_AGGREGATES = """
TRUNCATE core_prefix_counts, core_expiry_days, core_value_holders, core_store_shadow;
UPDATE core_root_counts SET documents = 0, namespaces = 0"""
SAVE_POSITION = """
INSERT INTO core_capture_position AS p (slot_name, lsn, caught_up_lsn, caught_up_at)
VALUES (%(slot)s, %(lsn)s::pg_lsn, %(caught_up_lsn)s::pg_lsn, %(caught_up_at)s::timestamptz)
ON CONFLICT (slot_name) DO UPDATE SET lsn = EXCLUDED.lsn, applied_at = now(),
    caught_up_lsn = coalesce(EXCLUDED.caught_up_lsn, p.caught_up_lsn),
    caught_up_at = coalesce(EXCLUDED.caught_up_at, p.caught_up_at),
    recount_snapshot = CASE WHEN EXCLUDED.lsn >= p.recount_lsn THEN NULL ELSE p.recount_snapshot END,
    recount_lsn = CASE WHEN EXCLUDED.lsn >= p.recount_lsn THEN NULL ELSE p.recount_lsn END"""

# The recount (issue 52): the agents' rows are read where the slot is read, in one REPEATABLE READ transaction whose
# first statement takes the snapshot, and streamed (COPY) into temporary tables of our database, where every
# aggregate is computed: the agents' server only reads, and the slot keeps only the agents' own WAL meanwhile.
RECOUNT_SOURCES = (
    (
        "core_recount_store (prefix text, key text, value jsonb, updated_at timestamptz, expires_at timestamptz)",
        "SELECT prefix, key, CASE WHEN prefix LIKE 'clientes.%' THEN value END, updated_at, expires_at FROM store",
    ),
    (
        "core_recount_vectors (root text, vectors bigint)",
        "SELECT split_part(prefix, '.', 1), count(*) FROM store_vectors GROUP BY 1",
    ),
    (
        "core_recount_checkpoints (thread_id text, checkpoint_ns text, checkpoint_id text, metadata jsonb, ts text)",
        "SELECT thread_id, checkpoint_ns, checkpoint_id, metadata, checkpoint ->> 'ts' FROM checkpoints",
    ),
    (
        "core_recount_threads (thread_id text)",
        "SELECT thread_id FROM checkpoints UNION SELECT thread_id FROM checkpoint_blobs "
        "UNION SELECT thread_id FROM checkpoint_writes",
    ),
)
# Each INSERT is in its table's primary-key order: in random order, at 10M documents, every checkpoint made the next
# insert into each index page write that whole page to the WAL again.
RECOUNT = (
    "TRUNCATE core_prefix_counts, core_expiry_days, core_value_holders, core_store_shadow, core_root_counts",
    """INSERT INTO core_prefix_counts (prefix, documents, last_write)
       SELECT prefix, count(*), max(updated_at) FROM core_recount_store GROUP BY prefix ORDER BY prefix""",
    """INSERT INTO core_root_counts (root, shard, documents, namespaces, vectors)
       SELECT root, 0, sum(documents), sum(namespaces), sum(vectors) FROM (
           SELECT root, documents, 1 AS namespaces, 0 AS vectors FROM core_prefix_counts
           UNION ALL SELECT root, 0, 0, vectors FROM core_recount_vectors) x
       GROUP BY root""",
    """INSERT INTO core_expiry_days (day, root, documents)
       SELECT (expires_at AT TIME ZONE 'UTC')::date, split_part(prefix, '.', 1), count(*)
       FROM core_recount_store WHERE expires_at IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2""",
    f"""INSERT INTO core_store_shadow (prefix, key, expires_day, value_hashes, hilo)
       SELECT prefix, key, expires_day, nullif(hashes, '{{}}'), hilo FROM (
           SELECT prefix, key, (expires_at AT TIME ZONE 'UTC')::date AS expires_day,
                  CASE WHEN prefix LIKE 'clientes.%%'
                       THEN ARRAY(SELECT hashtextextended(l, 0) FROM core_string_leaves(value) AS l) END AS hashes,
                  CASE WHEN prefix LIKE 'clientes.%%' THEN {HILO_OF.format(value="value")} END AS hilo
           FROM core_recount_store) s
       WHERE expires_day IS NOT NULL OR hashes <> '{{}}' OR hilo IS NOT NULL
       ORDER BY prefix, key""",
    """INSERT INTO core_value_holders (value_hash, cliente_id, documents)
       SELECT h, split_part(prefix, '.', 2), count(*) FROM core_store_shadow, unnest(value_hashes) AS h
       GROUP BY 1, 2 ORDER BY 1, 2""",
    "TRUNCATE core_checkpoint_shadow",
    """INSERT INTO core_checkpoint_shadow (thread_id, checkpoint_ns, checkpoint_id, subjects, ts)
       SELECT thread_id, checkpoint_ns, checkpoint_id, core_metadata_subjects(metadata), ts
       FROM core_recount_checkpoints ORDER BY 1, 2, 3""",
)
MARK_ALL_THREADS = """
INSERT INTO core_token_dirty (thread_id) SELECT thread_id FROM core_recount_threads ORDER BY 1
ON CONFLICT (thread_id) DO UPDATE SET claimed_at = NULL"""


def copy_sources(src: psycopg.Connection, ours: psycopg.Connection, *, staging: bool = False) -> None:
    """Copy RECOUNT_SOURCES as `src` sees them into `ours`: its UNLOGGED staging tables (`staging`: the dashboard's own
    database, core/sql/dashboard/001; nothing written to the WAL), else temporary tables dropped when its transaction
    ends."""
    for table, query in RECOUNT_SOURCES:
        name = table.split(" ", 1)[0]
        ours.execute(f"TRUNCATE {name}" if staging else f"CREATE TEMP TABLE {table} ON COMMIT DROP")
        with (
            src.cursor().copy(f"COPY ({query}) TO STDOUT") as out,
            ours.cursor().copy(f"COPY {name} FROM STDIN") as into,
        ):
            for block in out:
                into.write(block)


def copy_mirrors(src: psycopg.Connection, ours: psycopg.Connection) -> None:
    """Replace the mirrors of the agents' own logs in `ours` (the dashboard's own database) by their rows as `src`
    sees them (COPY streamed, in key order)."""
    for table, (columns, key) in changes.MIRRORED.items():
        names = ", ".join(columns)
        ours.execute(f"TRUNCATE {table}")
        with (
            src.cursor().copy(f"COPY (SELECT {names} FROM {table} ORDER BY {', '.join(key)}) TO STDOUT") as out,
            ours.cursor().copy(f"COPY {table} ({names}) FROM STDIN") as into,
        ):
            for block in out:
                into.write(block)


def stream_recount(
    src: psycopg.Connection, ours: psycopg.Connection, *, mark_all: bool = True, apart: bool = False
) -> None:
    """Inside a REPEATABLE READ transaction on `src` and a transaction on `ours`: copy what the aggregates are
    counted from into `ours` (copy_sources: its staging tables when it is the dashboard's own database, `apart`,
    emptied again before the commit, so that no copy of a customer's values outlives the recount; else temporary
    tables, also where `src` is the agents' standby and ours their primary) and recount every aggregate there;
    `mark_all`: mark every thread dirty for the token index too. `apart`: the mirrors of the agents' own logs are
    copied again too (copy_mirrors; where ours is the agents' database, those tables are the agents' own, never
    written here)."""
    copy_sources(src, ours, staging=apart)
    for statement in RECOUNT:
        ours.execute(statement)
    if mark_all:
        ours.execute(MARK_ALL_THREADS)
    if apart:
        copy_mirrors(src, ours)
        ours.execute("TRUNCATE " + ", ".join(table.split(" ", 1)[0] for table, _ in RECOUNT_SOURCES))


SAVE_RECOUNT = """
INSERT INTO core_capture_position AS p (slot_name, lsn, recount_snapshot, recount_lsn, recounted_at,
                                        caught_up_lsn, caught_up_at)
VALUES (%s, %s::pg_lsn, %s::pg_snapshot, %s::pg_lsn, now(), %s::pg_lsn, now())
ON CONFLICT (slot_name) DO UPDATE SET lsn = EXCLUDED.lsn, applied_at = now(),
    recount_snapshot = EXCLUDED.recount_snapshot, recount_lsn = EXCLUDED.recount_lsn,
    recounted_at = now(), caught_up_lsn = EXCLUDED.caught_up_lsn, caught_up_at = now()"""


def connect(dsn: str, **kwargs: object) -> psycopg.Connection:
    """An autocommit connection (`conn.transaction()` is then a real BEGIN ... COMMIT) whose timestamps decode as
    UTC ISO text (the expiry day is the first ten characters)."""
    kwargs.setdefault("application_name", "core_capture")  # what other_consumer() tells apart from ours
    conn = psycopg.connect(dsn, autocommit=True, options="-c TimeZone=UTC -c DateStyle=ISO", **kwargs)  # type: ignore[arg-type]
    return conn


@dataclass
class Links:
    """The follower's connections (issue 52). `src` reads the slot and the agents' rows: their primary, or their
    physical standby (PG_AGENTES_STANDBY); `ours` keeps the follower's state: the dashboard's database (PG_DASHBOARD;
    a connection of its own even where that is the agents' database); `primary` is the agents' primary (`src` itself
    unless `src` is a standby), where only a running-transactions record is ever asked for. `apart`: ours is not the
    agents' database (the follower then keeps the mirrors of their own logs, changes.MIRRORED)."""

    src: psycopg.Connection
    ours: psycopg.Connection
    primary: psycopg.Connection
    standby: bool = False
    apart: bool = False


@contextmanager
def open_links(dsn: str, *, application_name: str = "core_capture") -> Iterator[Links]:
    """The connections the follower of the agents' database `dsn` works with, closed on exit."""
    source = decode_dsn_for(dsn)
    with contextlib.ExitStack() as stack:
        src = stack.enter_context(connect(source, application_name=application_name))
        row = src.execute("SELECT pg_is_in_recovery()").fetchone()
        primary = src if source == dsn else stack.enter_context(connect(dsn, application_name=application_name))
        ours_dsn = dashboard_dsn_for(dsn)
        ours = stack.enter_context(connect(ours_dsn, application_name=application_name))
        yield Links(src, ours, primary, bool(row and row[0]), server_key(ours_dsn) != server_key(dsn))


class Follower:
    def __init__(self, dsn: str, *, slot: str | None = None, batch_changes: int = 20_000) -> None:
        self.dsn = dsn  # the agents' primary: where the slot and the dashboard's database are looked up
        self.batch_changes = batch_changes
        self._last_heartbeat = 0.0
        self.on_slot_created: list = []  # test hook: callables run between the slot's creation and the recount
        self._created_at: int | None = None  # WAL position of the slot this process created, until caught up
        self._last_snapshot = 0.0
        self._publication_checked = 0.0
        if slot is None:
            with psycopg.connect(dsn) as conn:
                slot = slot_name_for(conn.info.dbname)
        self.slot = slot

    # --- setup -----------------------------------------------------------------------------------------
    def setup(self, links: Links | None = None) -> bool:
        """Check the publication, create the slot if missing and recount from the tables at its start.
        Returns True when it created the slot. Raises CaptureNotAllowed naming what is missing."""
        if links is None:
            with open_links(self.dsn) as own:
                return self.setup(own)
        src = links.src
        level = src.execute("SHOW wal_level").fetchone()
        if level is None or level[0] != "logical":
            raise CaptureNotAllowed(
                f"wal_level is {level[0] if level else '?'}: the change follower needs wal_level = logical "
                "(a server restart; see docs/operator.md)"
            )
        if not src.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (PUBLICATION,)).fetchone():
            raise CaptureNotAllowed(
                f"publication {PUBLICATION} is missing: run the migrations (python -m core.migrate) as the owner "
                "of the agents' tables"
            )
        self._check_publication(links)
        slot = src.execute(
            "SELECT database = current_database(), plugin, wal_status FROM pg_replication_slots WHERE slot_name = %s",
            (self.slot,),
        ).fetchone()
        if slot is not None and (not slot[0] or slot[1] != "pgoutput"):
            raise CaptureNotAllowed(
                f"replication slot {self.slot} belongs to another database or plugin ({slot[1]}): drop it or name "
                "another slot"
            )
        if slot is not None and slot[2] != "lost":
            has_position = links.ours.execute(
                "SELECT 1 FROM core_capture_position WHERE slot_name = %s", (self.slot,)
            ).fetchone()
            if has_position:
                return False
        if slot is not None and slot[2] == "lost" and self._created_at is not None:
            raise self._lost_in_recount(links)  # this process made it and never caught up: it would be lost again
        if slot is not None:  # lost (max_slot_wal_keep_size), taken, or made by someone else: start again
            try:
                src.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
            except psycopg.errors.ObjectInUse as exc:
                raise _slot_taken(links, self.slot, other_consumer(src, self.slot)) from exc
        created = self._create_slot(links)
        self._created_at = lsn_int(created)
        for hook in self.on_slot_created:
            hook()
        self._recount(links)
        if self._slot_lost(src):  # the agents' WAL meanwhile went past the limit
            raise self._lost_in_recount(links)
        return True

    def _create_slot(self, links: Links) -> str:
        """Create the slot where `src` is. On a standby the creation waits for a running-transactions record from the
        primary: the follower asks the primary for one each second meanwhile (pg_log_standby_snapshot, granted in
        deploy/capture-grants.sql; without that right the bgwriter's, every 15 s, ends the wait)."""
        done = threading.Event()
        nudge = None
        if links.standby:
            nudge = threading.Thread(target=self._nudge, args=(done,), name="capture-slot-nudge", daemon=True)
            nudge.start()
        try:
            row = links.src.execute(
                "SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput')", (self.slot,)
            ).fetchone()
        except psycopg.errors.InsufficientPrivilege as exc:
            raise CaptureNotAllowed(f"creating the slot needs the REPLICATION attribute (or superuser): {exc}") from exc
        finally:
            done.set()
            if nudge is not None:
                nudge.join(5)
        assert row is not None
        return str(row[0])

    def _nudge(self, done: threading.Event) -> None:
        """Until `done`: a running-transactions record on the primary each second (a connection of its own: the
        follower's primary connection may be the one waiting)."""
        try:
            with connect(self.dsn, application_name="core_capture_nudge") as conn:
                while not done.wait(1.0):
                    conn.execute("SELECT pg_log_standby_snapshot()")
        except psycopg.Error as exc:
            log.warning("change follower: cannot ask the primary for a running-transactions record (%s)", exc)

    def _check_publication(self, links: Links) -> None:
        """A table or column taken out, a row filter or an action left out would be missed silently: refuse, and
        forget the position, so that once the publication is as the migrations made it the follower recreates its
        slot and recounts (what the slot did not carry meanwhile is then counted)."""
        self._publication_checked = time.monotonic()
        altered = publication_differences(links.src)
        if altered:
            links.ours.execute("DELETE FROM core_capture_position WHERE slot_name = %s", (self.slot,))
            raise CaptureNotAllowed(
                f"publication {PUBLICATION} was altered ({'; '.join(altered)}): recreate it as "
                "core/sql/140_capture_store.sql, 144 and 171 do, then restart the follower (it recounts)"
            )

    def _slot_lost(self, src: psycopg.Connection) -> bool:
        row = src.execute("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (self.slot,)).fetchone()
        return row is not None and row[0] == "lost"

    def _lost_in_recount(self, links: Links) -> SlotLostInRecount:
        row = links.primary.execute(
            "SELECT pg_current_wal_insert_lsn()::text, current_setting('max_slot_wal_keep_size')"
        ).fetchone()
        assert row is not None
        written = (lsn_int(row[0]) - self._created_at) if self._created_at else 0
        return SlotLostInRecount(
            f"replication slot {self.slot} was invalidated (max_slot_wal_keep_size = {row[1]}) before the follower "
            f"caught up after creating it: {written / 1e6:,.0f} MB of WAL were written since its creation (the "
            "agents' writes meanwhile), more than the slot may keep. Raise max_slot_wal_keep_size above that "
            '(docs/operator.md, "Sizing the slot") and restart the follower: it recounts once more'
        )

    def _recount(self, links: Links) -> None:
        """Rebuild every aggregate from the tables in a snapshot taken after the slot's consistent point: read where
        the slot is, written in ours (stream_recount)."""
        start = time.monotonic()
        with links.src.transaction(), links.ours.transaction():
            links.src.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            row = links.src.execute(
                f"SELECT pg_current_snapshot()::text, {wal_now(links.standby, inserted=True)}, "
                "(SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s)",
                (self.slot,),
            ).fetchone()
            assert row is not None and row[2] is not None
            snapshot, snapshot_lsn, slot_lsn = row
            stream_recount(links.src, links.ours, apart=links.apart)
            links.ours.execute(RESOLVE_DEAD_LETTERS)
            links.ours.execute(DROP_RECOUNT_REQUEST, (self.slot,))
            links.ours.execute(SAVE_RECOUNT, (self.slot, slot_lsn, snapshot, snapshot_lsn, slot_lsn))
        log.info(
            "change follower: slot %s created, aggregates recounted in %.1f s", self.slot, time.monotonic() - start
        )

    # --- one batch ---------------------------------------------------------------------------------------
    def run_once(self, links: Links | None = None) -> BatchResult:
        if links is None:
            with open_links(self.dsn) as own:
                return self.run_once(own)
        src, ours = links.src, links.ours
        if time.monotonic() - self._publication_checked >= PUBLICATION_CHECK_S:  # altered while it runs
            self._check_publication(links)
        row = ours.execute(SELECT_POSITION, (self.slot,)).fetchone()
        if row and row[3]:  # an operator asked for a recount (request_recount)
            self._requested_recount(links)
            row = ours.execute(SELECT_POSITION, (self.slot,)).fetchone()
        flushed_row = src.execute(f"SELECT {wal_now(links.standby)}, now()::text, ({SELECT_CONFIRMED})", (self.slot,))
        flushed, flushed_at, confirmed = one_row(flushed_row)
        if row and confirmed and lsn_int(confirmed) > lsn_int(row[0]):
            # consumed by a read whose batch never committed here (the process stopped, or an error, in between)
            log.warning(
                "change follower: slot %s confirmed %s, only %s applied: recounting from the tables",
                self.slot,
                confirmed,
                row[0],
            )
            self._recount(links)
            row = ours.execute(SELECT_POSITION, (self.slot,)).fetchone()
        applied = lsn_int(row[0]) if row else 0
        recounted = Snapshot.parse(row[1]) if row and row[1] else None
        recount_lsn = lsn_int(row[2]) if row and row[2] else 0
        flushed = lsn_int(flushed)
        try:
            if confirmed and flushed <= lsn_int(confirmed):
                # nothing written since the slot's last read (a read confirms up to the WAL's end): no decoding, whose
                # start alone (the slot, its snapshot, pgoutput) was most of an idle follower's CPU on their server
                rows, consumed = [], lsn_int(confirmed)
            else:
                rows = src.execute(
                    GET, {"slot": self.slot, "n": self.batch_changes, "publication": PUBLICATION}
                ).fetchall()
                assert rows and rows[-1][1] is None, "the slot's confirmed position ends the read"
                consumed = rows.pop()[0]
        except psycopg.errors.ObjectInUse as exc:
            raise _slot_taken(links, self.slot, other_consumer(src, self.slot)) from exc
        except psycopg.errors.ObjectNotInPrerequisiteState as exc:  # invalidated: "can no longer access ..."
            if self._created_at is not None and self._slot_lost(src):
                raise self._lost_in_recount(links) from exc
            raise  # lost later (the follower was down): the next setup() recreates it and recounts
        drained = len(rows) < self.batch_changes
        if drained:
            self._created_at = None  # caught up once after its creation: a later loss is the ordinary kind
        txns = changes.decode_batch(rows)
        reached = max([applied] + [t.end_lsn for t in txns])
        todo = [
            t
            for t in txns
            if t.end_lsn > applied  # else applied before a kill that came before the slot's advance
            and not (recounted is not None and t.commit_lsn < recount_lsn and recounted.visible(t.xid))
        ]
        caught_up = max(reached, flushed) if drained else None
        # everything the read consumed is applied once this batch commits (the slot reads to the WAL's end, past
        # the flushed position taken before it, so `consumed` is never behind `caught_up`)
        moved_to = max(caught_up if caught_up is not None else reached, consumed)
        now = time.monotonic()
        if not todo:
            # Nothing to apply: what was consumed is saved as applied (a stop now recounts nothing), and, at most every
            # HEARTBEAT_S, how far everything is applied (the pages' lag).
            heartbeat = caught_up is not None and now - self._last_heartbeat >= HEARTBEAT_S
            if moved_to > applied or heartbeat:
                self._save_position(ours, moved_to, caught_up if heartbeat else None, flushed_at if heartbeat else None)
                if heartbeat:
                    self._last_heartbeat = now
            return BatchResult(0, 0, moved_to, drained, caught_up, flushed_at)
        dead = [letter for t in todo for letter in t.dead]  # rows that could not be decoded
        try:
            deltas = self._fold(links, todo)
            with ours.transaction():
                self._apply(ours, deltas)
                _pause("mid_batch")
                self._record(ours, dead)
                self._save_position(ours, moved_to, caught_up, flushed_at if caught_up is not None else None)
        except Exception as exc:
            if not row_error(ours, exc):
                raise
            log.warning("change follower: a batch failed on a row (%s): applying it change by change", exc)
            with ours.transaction():
                dead += self._apply_each(links, todo)
                self._record(ours, dead)
                self._save_position(ours, moved_to, caught_up, flushed_at if caught_up is not None else None)
        self._last_heartbeat = now
        _pause("after_apply")
        if self._may_log_snapshot and now - self._last_snapshot >= SNAPSHOT_S:
            self._log_snapshot(links.primary)
            self._last_snapshot = now
        return BatchResult(len(todo), sum(len(t.events) for t in todo), moved_to, drained, caught_up, flushed_at)

    def _apply_each(self, links: Links, txns: list[changes.Transaction]) -> list[changes.DeadLetter]:
        """Inside the batch's transaction: each message's changes in a savepoint of their own, in commit order; those
        that fail on their data are returned as dead letters, the rest applied."""
        dead: list[changes.DeadLetter] = []
        for t in txns:
            groups: dict[tuple[int, str], list[changes.Event]] = {}
            for origin, event in zip(t.origins, t.events, strict=True):
                groups.setdefault(origin, []).append(event)
            for (lsn, table), events in groups.items():
                one = changes.Transaction(t.xid, t.commit_lsn, t.end_lsn, events)
                try:
                    with links.ours.transaction():  # a savepoint
                        self._apply(links.ours, self._fold(links, [one]))
                except Exception as exc:
                    if not row_error(links.ours, exc):
                        raise
                    key = " | ".join(dict.fromkeys(changes.event_key(e) for e in events))
                    dead.append(changes.DeadLetter(lsn, t.xid, table, key, _error_text(exc), changes.touched(events)))
        return dead

    def _record(self, ours: psycopg.Connection, dead: list[changes.DeadLetter]) -> None:
        for d in dead:
            ours.execute(
                RECORD_DEAD_LETTER, (self.slot, lsn_text(d.lsn), d.xid, d.table, d.key, d.error, list(d.unknown))
            )
            log.error("change follower: dead letter at %s (%s %s): %s", lsn_text(d.lsn), d.table, d.key, d.error)

    def _requested_recount(self, links: Links) -> None:
        """Recount as asked; a recount that fails on the rows' data (a bad row still in the tables) is logged and the
        request dropped: the follower goes on, its dead letters stay open."""
        try:
            self._recount(links)
        except Exception as exc:
            if not row_error(links.ours, exc):
                raise
            log.error("change follower: the requested recount failed, dead letters stay open: %s", exc)
            links.ours.execute(DROP_RECOUNT_REQUEST, (self.slot,))

    def _save_position(self, ours: psycopg.Connection, lsn: int, caught_up: int | None, at: str | None) -> None:
        ours.execute(
            SAVE_POSITION,
            {
                "slot": self.slot,
                "lsn": lsn_text(lsn),
                "caught_up_lsn": lsn_text(caught_up) if caught_up is not None else None,
                "caught_up_at": at,
            },
        )

    @property
    def _may_log_snapshot(self) -> bool:
        """pg_log_standby_snapshot needs a superuser or EXECUTE granted (capture-grants.sql); refused once, never
        tried again in this process for that database."""
        return self.dsn not in _SNAPSHOT_REFUSED

    def _log_snapshot(self, primary: psycopg.Connection) -> None:
        """A running-transactions record now, so that the next reads of the slot start from here (SNAPSHOT_S)."""
        try:
            primary.execute("SELECT pg_log_standby_snapshot()")
        except psycopg.errors.InsufficientPrivilege:
            _SNAPSHOT_REFUSED.add(self.dsn)  # every read then decodes up to 15 s of WAL again: correct, slower
            log.warning(
                "change follower: pg_log_standby_snapshot() not permitted to this role (GRANT EXECUTE, "
                "deploy/capture-grants.sql); each read of the slot decodes up to 15 s of WAL again"
            )

    @staticmethod
    def _fold(links: Links, txns: list[changes.Transaction], shadow_keys: Callable = changes.store_keys) -> Deltas:
        """The batch's deltas; `shadow_keys` names the documents whose core_store_shadow rows are read first. The
        documents' hashes are computed in ours; only rows the stream did not carry are read where the slot is."""
        ours = links.ours
        keys = sorted(shadow_keys(txns))
        shadow: dict[tuple[str, str], Contribution] = {}
        if keys:
            for prefix, key, day, hashes, hilo in ours.execute(
                SELECT_SHADOW, ([k[0] for k in keys], [k[1] for k in keys])
            ).fetchall():
                shadow[(prefix, key)] = Contribution(day, tuple(hashes or ()), hilo)
        moved = sorted(changes.reread_keys(txns))
        moved_values: dict[tuple[str, str], str] = {}
        if moved:
            for prefix, key, value in links.src.execute(
                SELECT_REREAD, ([k[0] for k in moved], [k[1] for k in moved])
            ).fetchall():
                moved_values[(prefix, key)] = value
        values = sorted(changes.new_values(txns) | set(moved_values.values()))
        derived: dict[str, changes.Derived] = {}
        if values:
            derived = {
                v: changes.Derived(tuple(h), hilo) for v, h, hilo in ours.execute(SELECT_DERIVED, (values,)).fetchall()
            }
        reread = {k: derived[v] for k, v in moved_values.items()}
        deltas = changes.fold(txns, shadow, derived.__getitem__, reread)
        Follower._read_checkpoints(links.src, deltas)
        Follower._read_logs(links, deltas)
        return deltas

    @staticmethod
    def _read_logs(links: Links, d: Deltas) -> None:
        """The mirrored logs' rows the stream sent without a column, read where the slot is read as they are now (a
        later change is later in the stream; a row gone since is deleted by a later batch). Where ours is the agents'
        database, the mirrors are the agents' tables themselves: nothing to keep (emptied)."""
        if not links.apart:
            d.logs_truncated.clear()
            d.logs.clear()
            d.log_rereads.clear()
            return
        for table, keys in d.log_rereads.items():
            if not keys:
                continue
            reread = MIRROR_SQL[table][2]
            width = len(changes.MIRRORED[table][1])
            rows = links.src.execute(reread, ([k[0] for k in sorted(keys)],)).fetchall()
            kept = d.logs.setdefault(table, {})
            for row in rows:
                kept[tuple(row[:width])] = tuple(row)
        d.log_rereads.clear()

    @staticmethod
    def _read_checkpoints(src: psycopg.Connection, d: Deltas) -> None:
        """Fill `d.checkpoint_rows` (key -> (metadata text, ts)) from the rows where the slot is read: the `ts` of
        every checkpoint written, and the metadata too where the stream left it out (UNCHANGED_METADATA)."""
        written = sorted(k for k, m in d.checkpoints.items() if m)
        unchanged = sorted(k for k, m in d.checkpoints.items() if m == changes.UNCHANGED_METADATA)
        rows: dict[changes.CheckpointKey, tuple[str | None, str | None]] = {}
        if written:
            ts = {(t, ns, i): v for t, ns, i, v in src.execute(SELECT_CHECKPOINT_TS, _transpose(written)).fetchall()}
            rows.update({k: (d.checkpoints[k], ts.get(k)) for k in written})
        if unchanged:
            for t, ns, i, m, v in src.execute(SELECT_CHECKPOINT_ROWS, _transpose(unchanged)).fetchall():
                rows[(t, ns, i)] = (m, v)
        d.checkpoint_rows = rows

    @staticmethod
    def _apply(ours: psycopg.Connection, d: Deltas) -> None:
        cur = ours.cursor()
        if d.truncated_store:
            cur.execute(TRUNCATE_STORE_AGGREGATES)
        if d.truncated_vectors:
            cur.execute("UPDATE core_root_counts SET vectors = 0")
        touched = sorted(set(d.documents) | set(d.last_write))
        current: dict[str, int] = dict(cur.execute(SELECT_PREFIX_DOCUMENTS, (touched,)).fetchall()) if touched else {}
        roots: dict[str, list[int]] = {}  # root -> [documents, namespaces, vectors]
        upserts, gone = [], []
        for prefix in touched:
            before = current.get(prefix, 0)
            after = before + d.documents.get(prefix, 0)
            r = roots.setdefault(changes.root_of(prefix), [0, 0, 0])
            r[0] += after - before
            r[1] += (after > 0) - (before > 0)
            if after > 0:
                upserts.append((prefix, after, d.last_write.get(prefix)))
            elif prefix in current:
                gone.append(prefix)
        for root, n in d.vectors.items():
            roots.setdefault(root, [0, 0, 0])[2] += n
        if upserts:
            cur.execute(UPSERT_PREFIX, _transpose(upserts))
        if gone:
            cur.execute(DELETE_PREFIX, (gone,))
        rows = [(root, *v) for root, v in sorted(roots.items()) if any(v)]
        if rows:
            cur.execute(UPSERT_ROOT, _transpose(rows))
        expiry = [(day, root, n) for (day, root), n in sorted(d.expiry.items()) if n]
        if expiry:
            cur.execute(UPSERT_EXPIRY, _transpose(expiry))
        holders = [(h, c, n) for (h, c), n in sorted(d.holders.items()) if n]
        if holders:
            cur.execute(UPSERT_HOLDERS, _transpose(holders))
            low = [(h, c) for h, c, n in holders if n < 0]
            if low:
                cur.execute(DROP_EMPTY_HOLDERS, ([h for h, _ in low], [c for _, c in low]))
        keep = [
            (p, k, c.expires_day, _bigint_array(c.value_hashes), c.hilo)
            for (p, k), c in sorted(d.shadow.items())
            if not c.empty
        ]
        drop = [(p, k) for (p, k), c in d.shadow.items() if c.empty]
        if keep:
            cur.execute(UPSERT_SHADOW, _transpose(keep))
        if drop:
            cur.execute(DELETE_SHADOW, ([p for p, _ in drop], [k for _, k in drop]))
        if d.threads:
            cur.execute(MARK_THREADS, (sorted(d.threads),))
        if d.truncated_checkpoints:
            cur.execute("TRUNCATE core_checkpoint_shadow")
        # a checkpoint whose row is gone by now (deleted later in the stream) is kept with no ts until that batch
        present = sorted((k, m, ts) for k, (m, ts) in d.checkpoint_rows.items() if m)
        if present:
            cur.execute(UPSERT_CHECKPOINTS, _transpose([(*k, m, ts) for k, m, ts in present]))
        deleted = sorted(k for k, m in d.checkpoints.items() if m is None)
        if deleted:
            cur.execute(DELETE_CHECKPOINTS, _transpose(deleted))
        for table in sorted(d.logs_truncated):
            cur.execute(f"TRUNCATE {table}")
        for table, logged in sorted(d.logs.items()):
            upsert, delete, _ = MIRROR_SQL[table]
            gone = sorted(k[0] for k, v in logged.items() if v is None)
            if gone:
                cur.execute(delete, (gone,))
            kept = [v for _, v in sorted(logged.items()) if v is not None]
            if kept:
                cur.execute(upsert, _transpose(kept))

    # --- running -------------------------------------------------------------------------------------------
    def drain(self, links: Links, target: int = 0) -> int:
        """Apply batches until a read finds nothing more and everything before `target` is applied; the position
        is then saved (what other processes' catch_up waits for). Returns the transactions applied."""
        total = 0
        while True:
            result = self.run_once(links)
            total += result.transactions
            if result.drained and (result.caught_up or 0) >= target:
                self._save_position(links.ours, result.caught_up or 0, result.caught_up, result.caught_up_at)
                return total
            if result.drained:
                time.sleep(0.01)  # the target is written but not flushed yet (synchronous_commit = off)

    def run(self, *, stop: threading.Event | None = None, idle_sleep: float = IDLE_SLEEP_S) -> None:
        """Follow until `stop` is set: its connections for the follower's life, holding FOLLOWER_LOCK in ours
        (another follower of this database waits for it)."""
        stop = stop or threading.Event()
        while not stop.is_set():
            try:
                with open_links(self.dsn) as links:
                    while not stop.is_set() and not try_lock(links.ours):
                        stop.wait(5)
                    if stop.is_set():
                        return
                    self.setup(links)
                    while not stop.is_set():
                        if not self.run_once(links).drained:
                            continue
                        stop.wait(idle_sleep)
            except CaptureNotAllowed:
                raise
            except SlotTaken as exc:  # said until the other consumer goes; then setup recreates the slot
                log.error("change follower: %s", exc)
                stop.wait(5)
            except psycopg.Error as exc:  # database gone or restarted: connect again
                log.warning("change follower: %s; retrying", exc)
                stop.wait(2)


def wal_now(standby: bool, *, inserted: bool = False) -> str:
    """Where the WAL ends now as the slot's reader sees it: the primary's flushed WAL (`inserted`: inserted, every
    commit a snapshot there sees is before it, synchronous_commit off included), or what a standby replayed."""
    if standby:
        return "pg_last_wal_replay_lsn()::text"
    return "pg_current_wal_insert_lsn()::text" if inserted else "pg_current_wal_flush_lsn()::text"


def row_error(conn: psycopg.Connection, exc: BaseException) -> bool:
    """Whether `exc` is about a row's data (a dead letter) rather than the database or our code (a stop and retry):
    a data exception, an integrity violation, a limit exceeded (an index entry too large, stack depth), or a row
    Python could not read; never on a broken connection, a cancelled statement or an error of our SQL."""
    if conn.closed or conn.broken:
        return False
    if isinstance(exc, psycopg.Error):
        return isinstance(exc, psycopg.DataError | psycopg.IntegrityError) or (exc.sqlstate or "").startswith("54")
    return isinstance(exc, ValueError | TypeError | KeyError | IndexError)


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, psycopg.Error) and exc.diag.message_detail:
        text += f" ({exc.diag.message_detail})"
    return text[:2000]


def request_recount(dsn: str) -> None:
    """Ask this database's follower to recount its aggregates from the tables (it does so at its next read, under its
    own lock; a catch_up does it when no follower runs). Clears the dead letters when the recount succeeds."""
    with connect(dsn, application_name="core_capture_request") as conn:
        slot = slot_name_for(conn.info.dbname)
    with connect(dashboard_dsn_for(dsn), application_name="core_capture_request") as ours:
        ours.execute(REQUEST_RECOUNT, (slot,))


def _transpose(rows: list[tuple]) -> list[list]:
    """Rows (at least one) as column lists: the arrays of one set-based statement."""
    return [list(column) for column in zip(*rows, strict=True)]


def _bigint_array(hashes: tuple[int, ...]) -> str | None:
    """A bigint[] literal (arrays of differing lengths cannot be one 2-D parameter); None for no hashes."""
    return "{" + ",".join(map(str, hashes)) + "}" if hashes else None


def try_lock(conn: psycopg.Connection) -> bool:
    """Take the follower's session advisory lock (one follower, or one recount, per database at a time)."""
    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (FOLLOWER_LOCK,)).fetchone()
    return bool(row and row[0])


def caught_up_lsn(conn: psycopg.Connection, slot: str) -> int:
    row = conn.execute("SELECT caught_up_lsn::text FROM core_capture_position WHERE slot_name = %s", (slot,)).fetchone()
    return lsn_int(row[0]) if row and row[0] else 0


def flush_target(conn: psycopg.Connection) -> int:
    """The WAL end now, flushed (PostgreSQL 17+: a logical message with flush; before: the write position)."""
    if conn.info.server_version >= 170000:
        row = conn.execute("SELECT pg_logical_emit_message(false, 'core_capture', '', true)::text").fetchone()
    else:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return lsn_int(row[0])


def catch_up(dsn: str, timeout: float = 30.0, *, follower: Follower | None = None) -> None:
    """Make the aggregates include every change committed before this call: drain the slot here when no
    follower runs (creating it and recounting on first use), else wait for the running follower. Raises
    CaptureTimeout after `timeout` seconds, CaptureNotAllowed when logical decoding is not possible."""
    deadline = time.monotonic() + timeout
    with open_links(dsn) as links:
        follower = follower or Follower(dsn, slot=slot_name_for(links.primary.info.dbname))
        target = flush_target(links.primary)
        while True:
            if try_lock(links.ours):
                try:
                    follower.setup(links)
                    follower.drain(links, target)
                    return
                finally:
                    links.ours.execute("SELECT pg_advisory_unlock(%s)", (FOLLOWER_LOCK,))
            if caught_up_lsn(links.ours, follower.slot) >= target:
                return
            who = other_consumer(links.src, follower.slot)
            if who is not None:  # the running follower cannot read the slot either
                raise SlotTaken(f"replication slot {follower.slot} is read by another consumer ({who})")
            if time.monotonic() > deadline:
                raise CaptureTimeout(
                    f"the change follower did not apply the WAL up to {lsn_text(target)} within {timeout:.0f} s"
                )
            time.sleep(0.05)


def apply_pending(dsn: str, max_batches: int = 1) -> bool:
    """What a reader of the follower's tables calls when it must not wait: when no follower runs here (its lock is
    free), apply up to `max_batches` batches of what the slot holds, and return True; when one runs, return False at
    once (the reader is as of it, a fraction of a second). Also False, logged, where nothing can be applied from
    here: `dsn` a standby, no logical decoding (as of the sweep's last recount), a role without REPLICATION, a slot
    another consumer reads."""
    try:
        with open_links(dsn) as links:
            standby = links.primary.execute("SELECT pg_is_in_recovery()").fetchone()
            if (standby and standby[0]) or not try_lock(links.ours):
                return False
            try:
                follower = Follower(dsn, slot=slot_name_for(links.primary.info.dbname))
                follower.setup(links)
                target = flush_target(links.primary)  # committed before this call, flushed (synchronous_commit off)
                for _ in range(max_batches):
                    result = follower.run_once(links)
                    if result.drained and (result.caught_up or 0) >= target:
                        break
                return True
            finally:
                links.ours.execute("SELECT pg_advisory_unlock(%s)", (FOLLOWER_LOCK,))
    except (CaptureNotAllowed, SlotTaken, psycopg.Error) as exc:
        log.info("changes not applied by this reader: %s", exc)
        return False


# What the publication of migrations 140, 144 and 171 carries: these columns of these tables, every action.
PUBLISHED = {
    "store": {"prefix", "key", "value", "updated_at", "expires_at"},
    "store_vectors": {"prefix", "key", "field_name"},
    "checkpoints": {"thread_id", "checkpoint_ns", "checkpoint_id", "metadata"},
    "checkpoint_blobs": {"thread_id", "checkpoint_ns", "channel", "version"},
    "checkpoint_writes": {"thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"},
    # the agents' own logs, mirrored in the dashboard's own database (migration 171)
    **{table: set(columns) for table, (columns, _) in changes.MIRRORED.items()},
}


SELECT_PUBLISHED = """
SELECT tablename, attnames, rowfilter FROM pg_publication_tables WHERE pubname = %s AND schemaname = current_schema()"""


def publication_differences(conn: psycopg.Connection) -> list[str]:
    """How the publication differs from PUBLISHED (empty: it is as the migrations made it)."""
    rows = conn.execute(SELECT_PUBLISHED, (PUBLICATION,)).fetchall()
    found: dict[str, set[str]] = {table: set(columns) for table, columns, _ in rows}
    out = [f"{t} not published" for t in sorted(PUBLISHED.keys() - found.keys())]
    # a row filter hides every row it rejects from the slot: the follower would miss them and call itself caught up
    out += [f"{t} filtered by WHERE {where}" for t, _, where in sorted(rows) if where is not None]
    out += [f"{t} published too" for t in sorted(found.keys() - PUBLISHED.keys())]
    out += [
        f"{t} columns {sorted(found[t])}, not {sorted(PUBLISHED[t])}"
        for t in sorted(PUBLISHED.keys() & found.keys())
        if found[t] != PUBLISHED[t]
    ]
    actions = conn.execute(
        "SELECT pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication WHERE pubname = %s", (PUBLICATION,)
    ).fetchone()
    missing = [a for a, on in zip(("insert", "update", "delete", "truncate"), actions or (), strict=False) if not on]
    if missing:
        out.append(f"does not publish {', '.join(missing)}")
    return out


class UninstallRefused(RuntimeError):
    """The uninstall cannot run now (says why); nothing was removed."""


def uninstall(dsn: str) -> None:
    """Remove what capture installed for the agents' database: this database's slot (it would keep WAL forever) and
    the publication. Refused, removing nothing, while a follower runs (stop it first) or without the rights to drop
    the publication (run it as the owner of the agents' tables, like the migrations)."""
    with open_links(dsn, application_name="core_capture_uninstall") as links:
        if not try_lock(links.ours):
            raise UninstallRefused("a change follower runs on this database: stop it first (its Deployment or thread)")
        try:
            owner = links.primary.execute(
                "SELECT pg_has_role(current_user, pubowner, 'USAGE') FROM pg_publication WHERE pubname = %s",
                (PUBLICATION,),
            ).fetchone()
            if owner is not None and not owner[0]:
                raise UninstallRefused(
                    f"{links.primary.info.user} does not own publication {PUBLICATION}: run the uninstall as the "
                    "owner of the agents' tables (the role that runs the migrations)"
                )
            links.primary.execute(f"DROP PUBLICATION IF EXISTS {PUBLICATION}")
            drop_slot(dsn, links)
        finally:
            links.ours.execute("SELECT pg_advisory_unlock(%s)", (FOLLOWER_LOCK,))


def drop_slot(dsn: str, links: Links | None = None) -> None:
    """Remove this database's slot and the follower's position (the uninstall, a test's teardown)."""
    if links is None:
        with open_links(dsn) as own:
            return drop_slot(dsn, own)
    slot = slot_name_for(links.primary.info.dbname)
    links.src.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s", (slot,)
    )
    links.ours.execute("DELETE FROM core_capture_position WHERE slot_name = %s", (slot,))
    return None


def main() -> None:
    import argparse
    import signal

    from core.config import load_settings
    from core.db import resolve_dsn

    parser = argparse.ArgumentParser(
        prog="python -m core.capture.follower",
        description="Follow the agents' tables through logical decoding and keep the dashboard's aggregates.",
    )
    parser.add_argument("dsn", nargs="?", help="default: PG_AGENTES (or the embedded server)")
    parser.add_argument("--idle-sleep", type=float, default=IDLE_SLEEP_S)
    parser.add_argument(
        "--uninstall", action="store_true", help="remove this database's slot and the publication, then exit"
    )
    parser.add_argument(
        "--recount",
        action="store_true",
        help="ask the follower to recount its aggregates from the tables (clears its dead letters), then exit",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    dsn = args.dsn or resolve_dsn(load_settings())
    if args.recount:
        request_recount(dsn)
        print("recount requested: the follower recounts at its next read (with no follower running, at the next sync)")
        return
    if args.uninstall:
        try:
            uninstall(dsn)
        except UninstallRefused as exc:
            raise SystemExit(f"uninstall refused, nothing removed: {exc}") from exc
        print(f"removed: publication {PUBLICATION} and this database's slot")
        return
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    Follower(dsn).run(stop=stop, idle_sleep=args.idle_sleep)


if __name__ == "__main__":
    main()
