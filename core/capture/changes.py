"""What a batch of decoded transactions changes in our aggregates: pure Python, no SQL.

`decode_batch` turns pgoutput rows into transactions of events; `fold` replays the events in commit order over
the old contribution of each touched document (core_store_shadow, read by the follower) and returns the deltas the
follower writes in one transaction. The aggregates are those migrations 007/040/043/046 kept with triggers:
documents and last write per prefix, documents/namespaces/vectors per root, documents per expiry day and root,
documents per (value hash, customer), and each customer's document's `hilo` back-link (core_store_shadow.hilo,
what the dropped expression index on `store` served).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from core.capture import pgoutput

CHECKPOINT_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
CUSTOMERS = "clientes."  # core_value_holders_of: customers' documents only
# The agents' own logs (written by agent-side code, so they stay in the agents' database) that the follower mirrors
# into the dashboard's own database (issue 52, A'): table -> (its columns as published, in this order; its primary
# key's columns). Our statements joining them with our tables then read the mirror, in one database.
MIRRORED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "core_conversations": (
        ("thread_id", "agent", "subject_root", "subject_id", "started_at", "last_turn_at", "turns"),
        ("thread_id",),
    ),
    "core_memory_writes": (("id", "written_at", "prefix", "key", "thread_id", "agent"), ("id",)),
}


def root_of(prefix: str) -> str:
    return prefix.split(".", 1)[0]


def customer_of(prefix: str) -> str:
    """split_part(prefix, '.', 2)"""
    parts = prefix.split(".")
    return parts[1] if len(parts) > 1 else ""


# --- events ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Put:
    """A store row as written (INSERT or UPDATE new tuple). `value` is None when unchanged (TOASTed, not sent)."""

    prefix: str
    key: str
    updated_at: str | None
    expires_day: str | None
    value: str | None
    inserted: bool  # an INSERT (one more document), else an overwrite or a TTL refresh
    # an UPDATE that changed the document's key: the key it had (its value, when not sent, is the value it had there)
    moved_from: tuple[str, str] | None = None


@dataclass(frozen=True)
class Gone:
    prefix: str
    key: str


@dataclass(frozen=True)
class Vector:
    prefix: str
    delta: int


@dataclass(frozen=True)
class Truncated:
    store: bool
    vectors: bool
    checkpoints: bool = False
    logs: tuple[str, ...] = ()  # mirrored logs truncated (MIRRORED)


@dataclass(frozen=True)
class Thread:
    thread_id: str


CheckpointKey = tuple[str, str, str]  # (thread_id, checkpoint_ns, checkpoint_id)


@dataclass(frozen=True)
class Checkpoint:
    """A `checkpoints` row as written. `metadata` is None when unchanged (TOASTed, not sent)."""

    key: CheckpointKey
    metadata: str | None


@dataclass(frozen=True)
class CheckpointGone:
    key: CheckpointKey


LogKey = tuple[str, ...]  # a mirrored log row's primary key, as text
LogValues = tuple[str | None, ...]  # its columns in MIRRORED's order, as text (None: NULL)


@dataclass(frozen=True)
class Logged:
    """A row of a mirrored log as written (INSERT or UPDATE). `values` is None when a column was not sent (an unchanged
    TOASTed value): the follower reads that row as it is now."""

    table: str
    key: LogKey
    values: LogValues | None


@dataclass(frozen=True)
class LoggedGone:
    table: str
    key: LogKey


Event = Put | Gone | Vector | Truncated | Thread | Checkpoint | CheckpointGone | Logged | LoggedGone


@dataclass(frozen=True)
class DeadLetter:
    """A change the follower could not decode or apply: skipped, recorded (core_capture_dead_letters), and the
    aggregates it touches named unknown until a recount."""

    lsn: int
    xid: int
    table: str
    key: str
    error: str
    unknown: tuple[str, ...]


@dataclass
class Transaction:
    xid: int
    commit_lsn: int
    end_lsn: int = 0
    events: list[Event] = field(default_factory=list)
    # per event: the position and table of the message it came from (one message may give two events)
    origins: list[tuple[int, str]] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)  # messages that could not be decoded


def _day(expires_at: object) -> str | None:
    """The UTC day of a timestamptz's text (the follower's session runs with TimeZone UTC, DateStyle ISO):
    '2026-12-01 10:00:00+00' -> '2026-12-01', '11026-12-01 ...' -> '11026-12-01', '0044-03-15 ... BC' ->
    '0044-03-15 BC', 'infinity' as it is (all valid `date` input)."""
    if not isinstance(expires_at, str):
        return None
    day = expires_at.split(" ", 1)[0]
    return day + " BC" if expires_at.endswith(" BC") else day


def _col(rel: pgoutput.Relation, tup: tuple[object, ...], name: str) -> object:
    return tup[rel.columns.index(name)] if name in rel.columns else None


def _key_col(rel: pgoutput.Relation, msg: pgoutput.Insert | pgoutput.Update, name: str) -> str:
    """A key column of the new tuple; when it is stored out of line and unchanged it is not sent there, and PostgreSQL
    sends the old key instead (replica identity with external values)."""
    value = _col(rel, msg.new, name)
    if value is pgoutput.UNCHANGED and isinstance(msg, pgoutput.Update) and msg.old is not None:
        value = _col(rel, msg.old, name)
    if not isinstance(value, str):
        raise ValueError(f"{rel.name}.{name} not sent in the new row")
    return value


def message_events(msg: pgoutput.Message, relations: dict[int, pgoutput.Relation]) -> list[Event]:
    """The events one decoded pgoutput message gives (none for a table or action the aggregates ignore)."""
    if isinstance(msg, pgoutput.Truncate):
        names = {relations[o].name for o in msg.oids if o in relations}
        logs = tuple(sorted(names & MIRRORED.keys()))
        if names & {"store", "store_vectors", "checkpoints"} or logs:
            return [Truncated("store" in names, "store_vectors" in names, "checkpoints" in names, logs)]
        return []
    rel = relations.get(getattr(msg, "oid", -1))
    if rel is None:
        return []
    if rel.name in MIRRORED:
        return _logged(rel, msg)
    if rel.name == "store":
        if isinstance(msg, pgoutput.Insert | pgoutput.Update):
            new = msg.new
            value = _col(rel, new, "value")
            put = Put(
                _key_col(rel, msg, "prefix"),
                _key_col(rel, msg, "key"),
                v if isinstance(v := _col(rel, new, "updated_at"), str) else None,
                _day(_col(rel, new, "expires_at")),
                value if isinstance(value, str) else None,
                isinstance(msg, pgoutput.Insert),
            )
            if isinstance(msg, pgoutput.Update) and msg.old is not None:  # the key itself changed
                old = Gone(str(_col(rel, msg.old, "prefix")), str(_col(rel, msg.old, "key")))
                if (old.prefix, old.key) != (put.prefix, put.key):
                    moved = (old.prefix, old.key)
                    # the new key first: its value, when not sent, is the one the old key held before the Gone
                    return [Put(put.prefix, put.key, put.updated_at, put.expires_day, put.value, True, moved), old]
            return [put]
        if isinstance(msg, pgoutput.Delete):
            return [Gone(str(_col(rel, msg.old, "prefix")), str(_col(rel, msg.old, "key")))]
    elif rel.name == "store_vectors":
        if isinstance(msg, pgoutput.Insert):
            return [Vector(str(_col(rel, msg.new, "prefix")), 1)]
        if isinstance(msg, pgoutput.Delete):
            return [Vector(str(_col(rel, msg.old, "prefix")), -1)]
        if isinstance(msg, pgoutput.Update) and msg.old is not None:
            return [Vector(str(_col(rel, msg.old, "prefix")), -1), Vector(str(_col(rel, msg.new, "prefix")), 1)]
    elif rel.name == "checkpoints":
        if isinstance(msg, pgoutput.Insert | pgoutput.Update):
            key = _checkpoint_key(rel, msg.new)
            metadata = _col(rel, msg.new, "metadata")
            written: list[Event] = [Thread(key[0]), Checkpoint(key, metadata if isinstance(metadata, str) else None)]
            if isinstance(msg, pgoutput.Update) and msg.old is not None and _checkpoint_key(rel, msg.old) != key:
                return [CheckpointGone(_checkpoint_key(rel, msg.old)), *written]
            return written
        if isinstance(msg, pgoutput.Delete):
            return [CheckpointGone(_checkpoint_key(rel, msg.old))]
    elif rel.name in CHECKPOINT_TABLES and isinstance(msg, pgoutput.Insert | pgoutput.Update):
        return [Thread(str(_col(rel, msg.new, "thread_id")))]
    return []


def _logged(rel: pgoutput.Relation, msg: pgoutput.Message) -> list[Event]:
    """A mirrored log's change: the row written (and the key it left, when an UPDATE changed its key), or gone."""
    columns, key_columns = MIRRORED[rel.name]
    if isinstance(msg, pgoutput.Insert | pgoutput.Update):
        values = [_col(rel, msg.new, c) for c in columns]
        key = tuple(_key_col(rel, msg, c) for c in key_columns)
        sent = not any(v is pgoutput.UNCHANGED for v in values)
        row = Logged(rel.name, key, tuple(v if isinstance(v, str) else None for v in values) if sent else None)
        if isinstance(msg, pgoutput.Update) and msg.old is not None:
            old = tuple(str(_col(rel, msg.old, c)) for c in key_columns)
            if old != key:
                return [LoggedGone(rel.name, old), row]
        return [row]
    if isinstance(msg, pgoutput.Delete):
        return [LoggedGone(rel.name, tuple(str(_col(rel, msg.old, c)) for c in key_columns))]
    return []


def _checkpoint_key(rel: pgoutput.Relation, tup: tuple[object, ...]) -> CheckpointKey:
    return (
        str(_col(rel, tup, "thread_id")),
        str(_col(rel, tup, "checkpoint_ns")),
        str(_col(rel, tup, "checkpoint_id")),
    )


def decode_batch(rows: Iterable[tuple[int, bytes]]) -> list[Transaction]:
    """(lsn, pgoutput message) rows of whole transactions -> transactions with their events, in commit order."""
    relations: dict[int, pgoutput.Relation] = {}
    txns: list[Transaction] = []
    current: Transaction | None = None
    for lsn, data in rows:
        if current is not None and bytes(data[:1]) in (b"I", b"U", b"D"):
            try:
                row = pgoutput.decode(data)
                events = message_events(row, relations)
            except Exception as exc:  # a row that cannot be decoded: a dead letter, never a stop
                table = _table_of(data, relations)
                current.dead.append(
                    DeadLetter(lsn, current.xid, table, "?", f"{type(exc).__name__}: {exc}", table_unknown(table))
                )
                continue
            current.events.extend(events)
            current.origins.extend([(lsn, _table_of(data, relations))] * len(events))
            continue
        msg = pgoutput.decode(data)
        if isinstance(msg, pgoutput.Relation):
            relations[msg.oid] = msg
        elif isinstance(msg, pgoutput.Begin):
            current = Transaction(msg.xid, msg.final_lsn)
        elif isinstance(msg, pgoutput.Commit):
            if current is None:
                raise ValueError("pgoutput Commit without Begin")
            current.end_lsn = lsn
            txns.append(current)
            current = None
        elif current is not None:  # a TRUNCATE
            events = message_events(msg, relations)
            current.events.extend(events)
            current.origins.extend([(lsn, "truncate")] * len(events))
    return txns


def _table_of(data: bytes, relations: dict[int, pgoutput.Relation]) -> str:
    """The table a row message names (its relation oid follows the kind byte), as far as it can be read."""
    if len(data) >= 5:
        rel = relations.get(int.from_bytes(bytes(data[1:5]), "big"))
        if rel is not None:
            return rel.name
    return "?"


# --- what a change touches (a dead letter's aggregates, unknown until a recount) -------------------------------

PREFIX_DOCUMENTS = "documents per prefix"
ROOT_FIGURES = "documents, namespaces and vectors per root"
EXPIRY_DAYS = "documents per expiry day"
HOLDERS = "value holders and hilo links of customer"
CHECKPOINT_SUBJECTS = "checkpoint subjects and token index of thread"
MIRROR = "mirror of"  # "mirror of core_conversations: <key>"


def table_unknown(table: str) -> tuple[str, ...]:
    """What a change of `table` may touch when its row could not even be read."""
    if table in MIRRORED:
        return (f"{MIRROR} {table}: *",)
    if table in ("store", "store_vectors"):
        return (f"{PREFIX_DOCUMENTS}: *", f"{ROOT_FIGURES}: *", f"{EXPIRY_DAYS}: *", f"{HOLDERS}: *")
    return (f"{CHECKPOINT_SUBJECTS}: *",)


def event_key(e: Event) -> str:
    """The row an event is about, as the dead-letter table names it."""
    if isinstance(e, Put | Gone):
        return f"{e.prefix} / {e.key}"
    if isinstance(e, Checkpoint | CheckpointGone):
        return " / ".join(e.key)
    if isinstance(e, Vector):
        return e.prefix
    if isinstance(e, Thread):
        return e.thread_id
    if isinstance(e, Logged | LoggedGone):
        return " / ".join(e.key)
    return "TRUNCATE"


def touched(events: Iterable[Event]) -> tuple[str, ...]:
    """The aggregates these events change, each with the prefix, root, customer or thread it is about."""
    out: list[str] = []
    for e in events:
        if isinstance(e, Put | Gone | Vector):
            root = root_of(e.prefix)
            out += [f"{PREFIX_DOCUMENTS}: {e.prefix}", f"{ROOT_FIGURES}: {root}"]
            if not isinstance(e, Vector):
                out.append(f"{EXPIRY_DAYS}: {root}")
                if e.prefix.startswith(CUSTOMERS):
                    out.append(f"{HOLDERS}: {customer_of(e.prefix)}")
            if isinstance(e, Put) and e.moved_from is not None:
                out += touched([Gone(*e.moved_from)])
        elif isinstance(e, Checkpoint | CheckpointGone):
            out.append(f"{CHECKPOINT_SUBJECTS}: {e.key[0]}")
        elif isinstance(e, Thread):
            out.append(f"{CHECKPOINT_SUBJECTS}: {e.thread_id}")
        elif isinstance(e, Logged | LoggedGone):
            out.append(f"{MIRROR} {e.table}: {' / '.join(e.key)}")
        elif isinstance(e, Truncated):
            if e.store or e.vectors or e.checkpoints:
                out += table_unknown("store")
            for table in e.logs:
                out += table_unknown(table)
    return tuple(dict.fromkeys(out))


# --- the fold -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Contribution:
    """What one document adds to the aggregates (a core_store_shadow row)."""

    expires_day: str | None
    value_hashes: tuple[int, ...]
    hilo: str | None = None  # a customer's document's `value ->> 'hilo'` when it is a JSON string

    @property
    def empty(self) -> bool:
        return self.expires_day is None and not self.value_hashes and self.hilo is None


NOTHING = Contribution(None, ())


@dataclass(frozen=True)
class Derived:
    """What a customer's document's value gives the shadow: its string leaves' hashes and its `hilo` link."""

    hashes: tuple[int, ...]
    hilo: str | None


NO_VALUE = Derived((), None)


@dataclass
class Deltas:
    truncated_store: bool = False
    truncated_vectors: bool = False
    documents: Counter[str] = field(default_factory=Counter)  # per prefix
    last_write: dict[str, str] = field(default_factory=dict)  # per prefix, max updated_at (text, UTC ISO)
    vectors: Counter[str] = field(default_factory=Counter)  # per root
    expiry: Counter[tuple[str, str]] = field(default_factory=Counter)  # (day, root)
    holders: Counter[tuple[int, str]] = field(default_factory=Counter)  # (value hash, customer)
    shadow: dict[tuple[str, str], Contribution] = field(default_factory=dict)  # final state of touched documents
    threads: set[str] = field(default_factory=set)
    truncated_checkpoints: bool = False
    # final state of each touched checkpoint: its metadata text, UNCHANGED_METADATA (read it from the row), or
    # None (deleted)
    checkpoints: dict[CheckpointKey, str | None] = field(default_factory=dict)
    # each checkpoint written, as its row holds it now where the slot is read: (metadata text, ts) (the follower)
    checkpoint_rows: dict[CheckpointKey, tuple[str | None, str | None]] = field(default_factory=dict)
    # the mirrored logs (MIRRORED): the tables truncated first, then per table each touched row's final state (its
    # values, or None: deleted), and the rows to read as they are now where the slot is read (a column not sent)
    logs_truncated: set[str] = field(default_factory=set)
    logs: dict[str, dict[LogKey, LogValues | None]] = field(default_factory=dict)
    log_rereads: dict[str, set[LogKey]] = field(default_factory=dict)


UNCHANGED_METADATA = ""  # a checkpoint rewritten with its TOASTed metadata unchanged (never valid JSON text)


def store_keys(txns: Iterable[Transaction]) -> set[tuple[str, str]]:
    """The documents whose contribution before the batch the fold needs (their core_store_shadow rows): every one
    the batch touches, except those it first INSERTs (no such row existed then, so neither did its shadow row). The
    agents mostly write new documents: the follower then reads no shadow row for them."""
    first: dict[tuple[str, str], bool] = {}  # document -> its first event in the batch is an INSERT
    for t in txns:
        for e in t.events:
            if isinstance(e, Put | Gone):
                first.setdefault((e.prefix, e.key), isinstance(e, Put) and e.inserted)
    return {k for k, inserted in first.items() if not inserted}


def new_values(txns: Iterable[Transaction]) -> set[str]:
    """The customers' document values whose hashes and `hilo` the fold needs."""
    return {
        e.value
        for t in txns
        for e in t.events
        if isinstance(e, Put) and e.value is not None and e.prefix.startswith(CUSTOMERS)
    }


def reread_keys(txns: Iterable[Transaction]) -> set[tuple[str, str]]:
    """Documents moved into a customer's namespace from another with their value unchanged (not sent): their old
    contribution has no hashes (only customers' documents have them), so the follower reads the value from the row."""
    return {
        (e.prefix, e.key)
        for t in txns
        for e in t.events
        if isinstance(e, Put)
        and e.value is None
        and e.moved_from is not None
        and e.prefix.startswith(CUSTOMERS)
        and not e.moved_from[0].startswith(CUSTOMERS)
    }


def fold(
    txns: Iterable[Transaction],
    shadow: dict[tuple[str, str], Contribution],
    derive: Callable[[str], Derived],
    reread: dict[tuple[str, str], Derived] | None = None,
) -> Deltas:
    """Replay `txns` in order over `shadow` (the touched documents' contributions before the batch; a document
    missing from it contributes nothing) and return the deltas and the touched documents' final contributions.
    `reread`: what the rows of `reread_keys(txns)` give now (a row missing is settled by its later changes)."""
    d = Deltas()
    state: dict[tuple[str, str], Contribution] = {}

    def before(k: tuple[str, str]) -> Contribution:
        if k in state:
            return state[k]
        return NOTHING if d.truncated_store else shadow.get(k, NOTHING)

    def add(prefix: str, c: Contribution, sign: int) -> None:
        if c.expires_day is not None:
            d.expiry[(c.expires_day, root_of(prefix))] += sign
        if c.value_hashes:
            customer = customer_of(prefix)
            for h in c.value_hashes:
                d.holders[(h, customer)] += sign

    for txn in txns:
        for e in txn.events:
            if isinstance(e, Truncated):
                if e.store:
                    d.truncated_store = True
                    for kept in (d.documents, d.last_write, d.expiry, d.holders):
                        kept.clear()
                    state = {k: NOTHING for k in state}
                if e.vectors:
                    d.truncated_vectors = True
                    d.vectors.clear()
                if e.checkpoints:
                    d.truncated_checkpoints = True
                    d.checkpoints.clear()
                for table in e.logs:
                    d.logs_truncated.add(table)
                    d.logs.pop(table, None)
                    d.log_rereads.pop(table, None)
            elif isinstance(e, Put):
                k = (e.prefix, e.key)
                old = before(k)
                if e.value is not None:
                    got = derive(e.value) if e.prefix.startswith(CUSTOMERS) else NO_VALUE
                elif not e.prefix.startswith(CUSTOMERS):
                    got = NO_VALUE
                elif e.moved_from is None:  # value unchanged (a TTL refresh of a TOASTed document)
                    got = Derived(old.value_hashes, old.hilo)
                elif e.moved_from[0].startswith(CUSTOMERS):  # key changed, value unchanged: what it held there
                    was = before(e.moved_from)
                    got = Derived(was.value_hashes, was.hilo)
                else:  # from another namespace, which keeps no hashes: the value as the row holds it
                    got = (reread or {}).get(k, NO_VALUE)
                new = Contribution(e.expires_day, got.hashes, got.hilo)
                add(e.prefix, old, -1)
                add(e.prefix, new, 1)
                state[k] = new
                if e.inserted:
                    d.documents[e.prefix] += 1
                if e.updated_at is not None and e.updated_at > d.last_write.get(e.prefix, ""):
                    d.last_write[e.prefix] = e.updated_at
            elif isinstance(e, Gone):
                k = (e.prefix, e.key)
                add(e.prefix, before(k), -1)
                state[k] = NOTHING
                d.documents[e.prefix] -= 1
            elif isinstance(e, Vector):
                d.vectors[root_of(e.prefix)] += e.delta
            elif isinstance(e, Thread):
                d.threads.add(e.thread_id)
            elif isinstance(e, Checkpoint):
                if e.metadata is not None:
                    d.checkpoints[e.key] = e.metadata
                elif d.checkpoints.get(e.key) is None:  # unchanged since a write not in this batch
                    d.checkpoints[e.key] = UNCHANGED_METADATA
            elif isinstance(e, CheckpointGone):
                d.checkpoints[e.key] = None
            elif isinstance(e, Logged):
                rereads = d.log_rereads.setdefault(e.table, set())
                if e.values is None:
                    d.logs.setdefault(e.table, {}).pop(e.key, None)
                    rereads.add(e.key)
                else:
                    d.logs.setdefault(e.table, {})[e.key] = e.values
                    rereads.discard(e.key)
            elif isinstance(e, LoggedGone):
                d.logs.setdefault(e.table, {})[e.key] = None
                d.log_rereads.setdefault(e.table, set()).discard(e.key)
    d.shadow = state
    return d
