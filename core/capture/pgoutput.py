"""A decoder of PostgreSQL's pgoutput messages (protocol version 1), as returned by
`pg_logical_slot_peek_binary_changes(..., 'proto_version', '1', 'publication_names', ...)`.

Message formats: PostgreSQL docs, "Logical Replication Message Formats". Only what protocol 1 sends.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

# A column of a tuple: None (NULL), UNCHANGED (an unchanged TOASTed value not sent), or its text form.
UNCHANGED = object()


@dataclass(frozen=True)
class Begin:
    final_lsn: int
    commit_ts: int
    xid: int


@dataclass(frozen=True)
class Commit:
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int


@dataclass(frozen=True)
class Relation:
    oid: int
    namespace: str
    name: str
    replica_identity: str
    columns: tuple[str, ...]
    key_flags: tuple[bool, ...] = field(default=())


@dataclass(frozen=True)
class Insert:
    oid: int
    new: tuple[object, ...]


@dataclass(frozen=True)
class Update:
    oid: int
    old: tuple[object, ...] | None  # 'K' (key columns only) or 'O' (whole old row), else None
    old_kind: str | None
    new: tuple[object, ...]


@dataclass(frozen=True)
class Delete:
    oid: int
    old: tuple[object, ...]
    old_kind: str  # 'K': replica identity key columns only (others NULL); 'O': the whole old row


@dataclass(frozen=True)
class Truncate:
    oids: tuple[int, ...]
    cascade: bool
    restart_identity: bool


@dataclass(frozen=True)
class Other:
    kind: str
    payload: bytes


Message = Begin | Commit | Relation | Insert | Update | Delete | Truncate | Other


_STRUCTS = {fmt: struct.Struct("!" + fmt) for fmt in "bhiIq"}  # compiled once: decoding is the follower's Python CPU
_INT16, _INT32 = _STRUCTS["h"], _STRUCTS["i"]
_NULL, _TOASTED, _TEXT, _BINARY = b"nutb"  # a tuple column's kind byte, as an int


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> int:
        s = _STRUCTS[fmt]
        (value,) = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return int(value)

    def byte(self) -> str:
        value = chr(self.data[self.pos])
        self.pos += 1
        return value

    def string(self) -> str:
        end = self.data.index(b"\0", self.pos)
        value = self.data[self.pos : end].decode()
        self.pos = end + 1
        return value

    def tuple_data(self) -> tuple[object, ...]:
        data, pos = self.data, self.pos
        (count,) = _INT16.unpack_from(data, pos)
        pos += 2
        values: list[object] = []
        for _ in range(count):
            kind = data[pos]
            pos += 1
            if kind == _NULL:
                values.append(None)
            elif kind == _TOASTED:
                values.append(UNCHANGED)
            elif kind in (_TEXT, _BINARY):
                (n,) = _INT32.unpack_from(data, pos)
                raw = data[pos + 4 : pos + 4 + n]
                pos += 4 + n
                values.append(raw.decode() if kind == _TEXT else raw)
            else:
                raise ValueError(f"unknown tuple column kind {chr(kind)!r}")
        self.pos = pos
        return tuple(values)


def decode(data: bytes) -> Message:
    """Decode one pgoutput message."""
    r = _Reader(bytes(data))
    kind = r.byte()
    if kind == "B":
        return Begin(r.take("q"), r.take("q"), r.take("I"))
    if kind == "C":
        return Commit(r.take("b"), r.take("q"), r.take("q"), r.take("q"))
    if kind == "R":
        oid, ns, name, ident = r.take("I"), r.string(), r.string(), r.byte()
        names, keys = [], []
        for _ in range(r.take("h")):
            flags = r.take("b")
            names.append(r.string())
            r.take("I"), r.take("i")  # type oid, typmod
            keys.append(bool(flags & 1))
        return Relation(oid, ns, name, ident, tuple(names), tuple(keys))
    if kind == "I":
        oid = r.take("I")
        if r.byte() != "N":
            raise ValueError("Insert without a new tuple")
        return Insert(oid, r.tuple_data())
    if kind == "U":
        oid = r.take("I")
        marker = r.byte()
        old, old_kind = None, None
        if marker in ("K", "O"):
            old, old_kind = r.tuple_data(), marker
            marker = r.byte()
        if marker != "N":
            raise ValueError("Update without a new tuple")
        return Update(oid, old, old_kind, r.tuple_data())
    if kind == "D":
        oid = r.take("I")
        old_kind = r.byte()
        return Delete(oid, r.tuple_data(), old_kind)
    if kind == "T":
        n, options = r.take("I"), r.take("b")
        return Truncate(tuple(r.take("I") for _ in range(n)), bool(options & 1), bool(options & 2))
    return Other(kind, bytes(data[1:]))
