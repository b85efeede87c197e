"""Which storage formats langgraph wrote into the checkpoint tables (issue 28): a fingerprint of the database or
of one thread, and the decryption of `EncryptedSerializer` rows for single-thread reads.

Formats (core_blob_format, migration 065): classic msgpack; DeltaChannel (snapshot blobs, and checkpoints whose
delta channels hold no value and are rebuilt from ancestor writes: core.checkpoints.delta); encrypted
(`msgpack+aes`); pickle (`pickle_fallback=True`, never unpickled: marked refused); json (old payloads, decoded);
unknown blob types; checkpoints older than format v4 (pending sends kept in the checkpoint).

Encrypted rows are decrypted here, in Python, with langgraph's own cipher
(`EncryptedSerializer.from_pycryptodome_aes(key=...)`), one configured key after another (rotation), then
decoded by the Python twin of the SQL decoder (core.checkpoints.payload_json: nothing imported or called).
The plaintext never goes back to PostgreSQL, not even as a query parameter.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable

from langgraph.checkpoint.serde.types import TASKS

from core.checkpoints.payload_json import Undecodable, payload_json
from core.db import Database

ENCRYPTED_MARK = "+"  # EncryptedSerializer's blob type is `<serializer type>+<cipher name>`
CURRENT_CHECKPOINT_V = 4  # what langgraph's loop writes; below it, pending sends live in the parent's TASKS writes

SELECT_MIGRATION = """
SELECT (SELECT max(v) FROM checkpoint_migrations) AS migration_version,
       NOT EXISTS (SELECT FROM information_schema.columns
                   WHERE table_schema = current_schema() AND table_name = 'checkpoints'
                     AND column_name = 'checkpoint_id') AS shallow"""

# Rows of checkpoint_blobs and checkpoint_writes by format (only their first bytes are read), with how many
# threads hold each non-classic format; `%(threads)s` NULL means every thread.
SELECT_ROW_FORMATS = """
SELECT format, count(*) AS n, count(DISTINCT thread_id) FILTER (WHERE format <> 'classic') AS threads
FROM (
    SELECT thread_id, core_blob_format(type, substring(blob FROM 1 FOR 6)) AS format FROM checkpoint_blobs
    WHERE %(threads)s::text[] IS NULL OR thread_id = ANY(%(threads)s)
    UNION ALL
    SELECT thread_id, core_blob_format(type, substring(blob FROM 1 FOR 6)) FROM checkpoint_writes
    WHERE %(threads)s::text[] IS NULL OR thread_id = ANY(%(threads)s)
) r
GROUP BY format"""

SELECT_CHECKPOINT_FORMATS = r"""
SELECT count(*) AS checkpoints,
       count(*) FILTER (WHERE metadata ? 'counters_since_delta_snapshot') AS delta_checkpoints,
       count(DISTINCT thread_id) FILTER (WHERE metadata ? 'counters_since_delta_snapshot') AS delta_threads,
       count(*) FILTER (WHERE checkpoint ->> 'v' ~ '^\d{1,9}$' AND (checkpoint ->> 'v')::int < %(current)s)
           AS older_checkpoints,
       -- langgraph moves a v < 4 checkpoint's sends (writes to its parent's TASKS channel) into its state on read
       count(*) FILTER (WHERE checkpoint ->> 'v' ~ '^\d{1,9}$' AND (checkpoint ->> 'v')::int < %(current)s
                          AND EXISTS (SELECT FROM checkpoint_writes w
                                      WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
                                        AND w.checkpoint_id = c.parent_checkpoint_id AND w.channel = %(tasks)s))
           AS pending_sends
FROM checkpoints c
WHERE %(threads)s::text[] IS NULL OR thread_id = ANY(%(threads)s)"""

# One thread's msgpack rows that the SQL decoder cannot read (a whole-database count would decode every row).
SELECT_THREAD_UNDECODABLE = """
SELECT count(*) AS n FROM (
    SELECT type, blob FROM checkpoint_blobs WHERE thread_id = %(thread_id)s AND type = 'msgpack'
    UNION ALL
    SELECT type, blob FROM checkpoint_writes WHERE thread_id = %(thread_id)s AND type = 'msgpack'
) r
WHERE core_checkpoint_payload(r.type, r.blob) ? 'undecodable'"""


@dataclass(frozen=True)
class Fingerprint:
    """The storage formats found in the database (`thread_id` None) or in one thread.

    Rows are checkpoint_blobs plus checkpoint_writes rows. `undecodable` counts rows of an unknown blob type, plus,
    for one thread (`decoded` True), the msgpack rows the decoder cannot read; `encrypted` rows are not in it."""

    thread_id: str | None
    migration_version: int | None  # max(v) of langgraph's checkpoint_migrations
    shallow: bool  # ShallowPostgresSaver's schema: no checkpoint history
    checkpoints: int
    rows: int
    encrypted: int
    encrypted_threads: int
    delta_snapshots: int
    delta_checkpoints: int  # checkpoints whose delta channels hold no value (rebuilt from writes)
    delta_threads: int
    pickle: int
    pickle_threads: int
    json: int
    undecodable: int
    older_checkpoints: int  # checkpoint format v < 4
    pending_sends: int  # checkpoints (v < 4) whose sends langgraph reads from their parent's writes
    decoded: bool  # every msgpack row was decoded to count `undecodable` (one thread only)

    @property
    def special(self) -> bool:
        """Anything but classic rows: what the dashboard must show differently."""
        return bool(self.shallow or self.encrypted or self.delta_snapshots or self.delta_checkpoints or self.pickle
                    or self.json or self.undecodable or self.older_checkpoints)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def fingerprint(db: Database, thread_id: str | None = None) -> Fingerprint:
    """The formats of the whole database (reads the first bytes of every blob and write: a full scan of the three
    checkpoint tables), or of one thread (by index, and its msgpack rows decoded to count the undecodable ones)."""
    with db.connection() as conn:
        head = conn.execute(SELECT_MIGRATION).fetchone()
        if head["shallow"]:  # our views and decoder functions cannot exist on that schema
            return Fingerprint(thread_id, head["migration_version"], True, *([0] * 13), False)
        params = {"threads": None if thread_id is None else [thread_id], "current": CURRENT_CHECKPOINT_V,
                  "tasks": TASKS}
        by = {r["format"]: r for r in conn.execute(SELECT_ROW_FORMATS, params)}
        ck = conn.execute(SELECT_CHECKPOINT_FORMATS, params).fetchone()
        bad = 0 if thread_id is None else conn.execute(SELECT_THREAD_UNDECODABLE, {"thread_id": thread_id}).fetchone()["n"]

    def n(fmt: str, key: str = "n") -> int:
        return int((by.get(fmt) or {}).get(key) or 0)

    return Fingerprint(
        thread_id=thread_id, migration_version=head["migration_version"], shallow=False,
        checkpoints=int(ck["checkpoints"]), rows=sum(int(r["n"]) for r in by.values()),
        encrypted=n("encrypted"), encrypted_threads=n("encrypted", "threads"),
        delta_snapshots=n("delta"), delta_checkpoints=int(ck["delta_checkpoints"]),
        delta_threads=max(int(ck["delta_threads"]), n("delta", "threads")),
        pickle=n("pickle"), pickle_threads=n("pickle", "threads"), json=n("json"),
        undecodable=n("unknown") + int(bad), older_checkpoints=int(ck["older_checkpoints"]),
        pending_sends=int(ck["pending_sends"]), decoded=thread_id is not None)


# --- encrypted rows ----------------------------------------------------------------------------------------


def is_encrypted(blob_type: Any) -> bool:
    return isinstance(blob_type, str) and ENCRYPTED_MARK in blob_type


class Decryptor:
    """Decrypts `EncryptedSerializer` rows with the configured keys (the first that authenticates wins) and
    decodes the plaintext without executing anything. No keys: every encrypted row stays unreadable."""

    def __init__(self, keys: Iterable[bytes] = ()):
        from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

        self._ciphers = [EncryptedSerializer.from_pycryptodome_aes(key=k).cipher for k in keys]

    def __bool__(self) -> bool:
        return bool(self._ciphers)

    def plaintext(self, blob_type: str, blob: bytes) -> tuple[str, bytes]:
        """The inner (type, bytes) of an encrypted row; raises Undecodable when no key opens it."""
        inner, cipher_name = blob_type.split(ENCRYPTED_MARK, 1)
        for cipher in self._ciphers:
            try:
                return inner, cipher.decrypt(cipher_name, bytes(blob))
            except (ValueError, KeyError, AssertionError):  # wrong key (MAC check) or another cipher
                continue
        raise Undecodable(f"encrypted ({blob_type}): {'no configured key opens it' if self else 'no key configured'}")

    def payload(self, blob_type: str, blob: bytes) -> Any:
        """The decoded JSON of an encrypted row, or the SQL decoder's marker shape when it cannot be read."""
        try:
            inner, data = self.plaintext(blob_type, blob)
            if inner == "pickle":
                return {"type": "pickle", "refused": True, "blob_type": blob_type, "size": len(blob)}
            return payload_json(inner, data)
        except Undecodable as exc:
            return {"undecodable": str(exc), "encrypted": True, "blob_type": blob_type, "size": len(blob or b"")}


def decryptor(settings: Any = None) -> Decryptor:
    """A Decryptor with the operator's keys (core.config: LANGGRAPH_AES_KEYS / LANGGRAPH_AES_KEY)."""
    if settings is None:
        from core.config import load_settings

        settings = load_settings()
    return Decryptor(settings.aes_keys)
