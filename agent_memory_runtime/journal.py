"""The dual saver's local journal: what a replica buffered while PostgreSQL was unreachable, on disk.

Write-ahead: while degraded, every buffered operation (checkpoint, writes, deletion) is appended here,
fsynced, before the call returns, so a SIGKILL or an OOM kill loses nothing; once a resync commits
operations the journal is rewritten with what is left (removed when nothing is). `close()` adds the
open degradation episode and its guard denials, and logs at ERROR. The next start with the same
replica id sets the file aside (`.replaying`) and replays it with the resync's own statements, then
removes it. A crash between a replay's commit and the journal's rewrite or removal leaves committed
operations here: the replay skips them by their ids (agent_memory_runtime.recovery), so nothing is applied
twice. A default replica id (host:pid) never matches after a restart: give the saver a stable
`replica_id` (required when PG_AGENTES is set).

Where: `$DUAL_SAVER_JOURNAL_DIR`, default `$AGENT_MEMORY_DATA/dual_saver_journal` (`./.data/...`);
one file per replica id and database (`<replica id, percent-encoded>@<hash of host, port, dbname>.journal`).
Records are msgpack (bytes and datetimes round-trip; nothing is imported or called on load), each framed
as a mark byte (0xC0) and then, escaped so that the mark appears nowhere else (SLIP's byte stuffing), a
magic, a format version, the length and a CRC-32 of the body, and the body. A record cut short by a
crash mid-write, or damaged, is skipped and reading resumes at the next mark: since no record's bytes
hold the mark, that is always the start of a record the saver wrote, never a frame a user's payload
carries (issue 43: a torn record followed by a payload holding a whole frame with a valid CRC). The
damaged file is moved aside (`.damaged-<time>`, logged at ERROR) and the good records are replayed. A
failed append is cut off the file, so nothing is appended after a torn tail. Version 2 (the frame
without mark or escaping, before issue 43) and version 1 (length-prefixed msgpack, no magic, before
issue 25) are still read.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import struct
import urllib.parse
import uuid
import zlib
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import ormsgpack
import psycopg

log = logging.getLogger("agent_memory_runtime.dual_saver")

JOURNAL_DIR_ENV = "DUAL_SAVER_JOURNAL_DIR"
_DATETIME_EXT = 1
_MARK = b"\xc0"  # the start of a frame, and nowhere else in the file
_ESCAPE = b"\xdb"
MAGIC = b"DSJ\x00"
# 1: a big-endian length, then the msgpack (no magic, no checksum); 2: header and body, without mark or escaping
_VERSION = 3
_UNMARKED_VERSION = 2
HEADER = struct.Struct(">4sBII")  # magic, version, length, CRC-32 of the body
_LEGACY_HEADER = struct.Struct(">I")


def _escape(data: bytes) -> bytes:
    """SLIP's byte stuffing: the mark becomes ESC 0xDC, the escape byte ESC 0xDD."""
    return data.replace(_ESCAPE, b"\xdb\xdd").replace(_MARK, b"\xdb\xdc")


def _unescape(data: bytes) -> bytes:
    return data.replace(b"\xdb\xdc", _MARK).replace(b"\xdb\xdd", _ESCAPE)


def default_journal_dir() -> Path:
    """`$DUAL_SAVER_JOURNAL_DIR`, else `$AGENT_MEMORY_DATA/dual_saver_journal` (./.data by default: the working
    directory's, the checkout's root for the dashboard and its demo)."""
    explicit = os.environ.get(JOURNAL_DIR_ENV)
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("AGENT_MEMORY_DATA") or Path.cwd() / ".data") / "dual_saver_journal"


def pack_default(obj: Any) -> Any:
    if isinstance(obj, datetime):
        return ormsgpack.Ext(_DATETIME_EXT, obj.isoformat().encode())
    raise TypeError(f"not journaled: {type(obj).__name__}")


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _DATETIME_EXT:
        return datetime.fromisoformat(data.decode())
    raise ValueError(f"unknown journal extension {code}")


def pack(value: Any) -> bytes:
    """`value` (a record, or a buffered operation) as the journal encodes it."""
    return ormsgpack.packb(value, default=pack_default, option=ormsgpack.OPT_PASSTHROUGH_DATETIME)


def _unpack(body: bytes) -> dict[str, Any] | None:
    try:
        record = ormsgpack.unpackb(body, ext_hook=_ext_hook)
    except (ormsgpack.MsgpackDecodeError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _record(raw: bytes, pos: int, version: int) -> tuple[dict[str, Any] | None, int]:
    """The record of a header and body at `raw[pos:]` (`version`), if whole and intact, and its end."""
    if len(raw) - pos < HEADER.size:
        return None, 0
    magic, found, size, crc = HEADER.unpack_from(raw, pos)
    body = raw[pos + HEADER.size : pos + HEADER.size + size]
    if magic != MAGIC or found != version or len(body) != size or zlib.crc32(body) != crc:
        return None, 0
    return _unpack(body), pos + HEADER.size + size


def read_framed(raw: bytes) -> tuple[list[dict[str, Any]], int]:
    """The records of a framed journal (version 3, or 2 before it) and how many bytes were skipped (torn or
    damaged)."""
    records, pos, skipped = [], 0, 0
    while pos < len(raw):
        if raw.startswith(_MARK, pos):  # a frame runs to the next mark
            end = raw.find(_MARK, pos + 1)
            end = len(raw) if end < 0 else end
            chunk = _unescape(raw[pos + 1 : end])
            record, used = _record(chunk, 0, _VERSION)
            if record is None or used != len(chunk):
                skipped += end - pos
            else:
                records.append(record)
            pos = end
            continue
        record, end = _record(raw, pos, _UNMARKED_VERSION)
        if record is None:  # version 2: resynchronise at the next frame of either version
            following = raw.find(MAGIC, pos + 1)
            if following < 0:
                following = len(raw)
            elif raw[following - 1 : following] == _MARK and following - 1 > pos:
                following -= 1
            skipped += following - pos
            pos = following
            continue
        records.append(record)
        pos = end
    return records, skipped


def _read_legacy(raw: bytes) -> tuple[list[dict[str, Any]], int]:
    """Version 1: length-prefixed msgpack; reading stops at the first record that does not read."""
    records, pos = [], 0
    while pos + _LEGACY_HEADER.size <= len(raw):
        (size,) = _LEGACY_HEADER.unpack_from(raw, pos)
        body = raw[pos + _LEGACY_HEADER.size : pos + _LEGACY_HEADER.size + size]
        record = _unpack(body) if len(body) == size else None
        if record is None:
            break
        records.append(record)
        pos += _LEGACY_HEADER.size + size
    return records, len(raw) - pos


class Journal:
    """Append-only, fsynced records of one replica id."""

    def __init__(self, directory: Path, replica_id: str, dsn: str):
        if not replica_id:
            raise ValueError("a journal needs a replica id")
        # The database in the name too: a replica id pointed at another database never replays here.
        info = psycopg.conninfo.conninfo_to_dict(dsn)
        target = hashlib.sha256(repr((info.get("host"), info.get("port"), info.get("dbname"))).encode()).hexdigest()[
            :12
        ]
        self.path = Path(directory) / f"{urllib.parse.quote(replica_id, safe='')}@{target}.journal"

        # Set aside before its replay: what any process appends meanwhile goes to a new `path`.
        self.aside = self.path.with_name(self.path.name + ".replaying")
        # Every change of `path` or `aside` holds an flock on this file (two processes with one replica id).
        self._lock_path = self.path.with_name(self.path.name + ".lock")
        self._writer = uuid.uuid4().hex  # tags this process's records: its rewrite keeps the others'
        self._aside_read = 0  # bytes of `aside` the last read returned

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def set_aside(self) -> bool:
        """Move the journal an earlier run left to `aside` (appended to one a replay has not finished);
        True when there is something to replay."""
        with self._locked():
            if self.path.exists():
                if self.aside.exists():
                    self._write(self.aside, self.aside.read_bytes() + self.path.read_bytes())
                    self._remove(self.path)
                else:
                    os.replace(self.path, self.aside)
                    self._sync_dir()
            return self.aside.exists()

    def append(self, record: dict[str, Any]) -> None:
        """Write one record and fsync it (and the folder, for a new file). Raises OSError if it cannot."""
        data = self._frame({**record, "writer": self._writer})
        with self._locked():
            new = not self.path.exists()
            with open(self.path, "ab") as f:
                start = f.tell()
                try:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                except BaseException:
                    f.truncate(start)  # never a torn record followed by a later one
                    raise
            if new:
                self._sync_dir()

    def rewrite(self, records: list[dict[str, Any]]) -> None:
        """Replace this process's records in the journal by `records`, atomically and fsynced; the other
        processes' records stay. No record left: the journal goes."""
        with self._locked():
            try:
                kept, _ = read_framed(self.path.read_bytes())
            except FileNotFoundError:
                kept = []
            kept = [r for r in kept if r.get("writer") != self._writer]
            kept += [{**r, "writer": self._writer} for r in records]
            if kept:
                self._write(self.path, b"".join(self._frame(r) for r in kept))
            else:
                self._remove(self.path)

    @staticmethod
    def _frame(record: dict[str, Any]) -> bytes:
        data = pack(record)
        return _MARK + _escape(HEADER.pack(MAGIC, _VERSION, len(data), zlib.crc32(data)) + data)

    def read(self) -> list[dict[str, Any]]:
        """Every readable record of the journal set aside for replay, oldest first; [] when there is none."""
        with self._locked():
            try:
                raw = self.aside.read_bytes()
            except FileNotFoundError:
                return []
            framed = raw.startswith(_MARK) or raw.startswith(MAGIC)
            records, skipped = (read_framed if framed else _read_legacy)(raw)
            if skipped:
                damaged = self.path.with_name(f"{self.path.name}.damaged-{datetime.now():%Y%m%dT%H%M%S}-{os.getpid()}")
                os.replace(self.aside, damaged)
                raw = b"".join(self._frame(r) for r in records)
                self._write(self.aside, raw)
                log.error(
                    "journal of this replica was damaged (%d bytes skipped, a crash mid-write or a bad disk): "
                    "moved aside to %s; its %d readable records are replayed",
                    skipped,
                    damaged,
                    len(records),
                )
            self._aside_read = len(raw)
            return records

    def replayed(self) -> bool:
        """What the last read returned is in PostgreSQL: it leaves the journal set aside; True if another
        process set more aside meanwhile (replayed next)."""
        with self._locked():
            try:
                rest = self.aside.read_bytes()[self._aside_read :]
            except FileNotFoundError:
                return False
            if rest:
                self._write(self.aside, rest)
            else:
                self._remove(self.aside)
            return bool(rest)

    def _write(self, path: Path, data: bytes) -> None:
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self._sync_dir()

    def _remove(self, path: Path) -> None:
        try:
            path.unlink()
        except FileNotFoundError:
            return
        self._sync_dir()

    def _sync_dir(self) -> None:
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
