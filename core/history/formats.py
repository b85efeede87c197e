"""Which storage formats langgraph wrote into the checkpoint tables (issue 28): a fingerprint of the database or
of one thread, and the decryption of `EncryptedSerializer` rows for single-thread reads.

Formats (core_blob_format, migration 065): classic msgpack; DeltaChannel (snapshot blobs, and checkpoints whose
delta channels hold no value and are rebuilt from ancestor writes: core.history.delta); encrypted
(`msgpack+aes`); pickle (`pickle_fallback=True`, never unpickled: marked refused); json (old payloads, decoded);
unknown blob types; checkpoints older than format v4 (pending sends kept in the checkpoint).

Encrypted rows are decrypted here, in Python, with langgraph's own cipher
(`EncryptedSerializer.from_pycryptodome_aes(key=...)`), one configured key after another (rotation), then
decoded by the Python twin of the SQL decoder (core.history.payload_json: nothing imported or called).
The plaintext never goes back to PostgreSQL, not even as a query parameter.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from langgraph.checkpoint.serde.types import TASKS

from core.db import Database, one
from core.history.payload_json import Undecodable, payload_json

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

# Some threads' msgpack rows that the SQL decoder cannot read (a whole-database count would decode every row).
SELECT_THREAD_UNDECODABLE = """
SELECT count(*) AS n FROM (
    SELECT type, blob FROM checkpoint_blobs WHERE thread_id = ANY(%(threads)s) AND type = 'msgpack'
    UNION ALL
    SELECT type, blob FROM checkpoint_writes WHERE thread_id = ANY(%(threads)s) AND type = 'msgpack'
) r
WHERE core_checkpoint_payload(r.type, r.blob) ? 'undecodable'"""


@dataclass(frozen=True)
class Fingerprint:
    """The storage formats found in the database (`thread_id` None) or in one thread.

    Rows are checkpoint_blobs plus checkpoint_writes rows. `undecodable` counts rows of an unknown blob type, plus,
    for one thread (`decoded` True), the msgpack rows the decoder cannot read; `encrypted` rows are not in it."""

    thread_id: str | None  # the thread, or None for the database or a set of threads
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
        return bool(
            self.shallow
            or self.encrypted
            or self.delta_snapshots
            or self.delta_checkpoints
            or self.pickle
            or self.json
            or self.undecodable
            or self.older_checkpoints
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def fingerprint(db: Database, threads: str | Iterable[str] | None = None) -> Fingerprint:
    """The formats of the whole database (reads the first bytes of every blob and write: a full scan of the three
    checkpoint tables), or of one thread or a list of threads (by index, and their msgpack rows decoded to count
    the undecodable ones)."""
    thread_id = threads if isinstance(threads, str) else None
    chosen = None if threads is None else [threads] if isinstance(threads, str) else sorted(set(threads))
    with db.connection() as conn:
        head = one(conn.execute(SELECT_MIGRATION).fetchone())
        if head["shallow"]:  # our views and decoder functions cannot exist on that schema
            return Fingerprint(thread_id, head["migration_version"], True, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, False)
        params = {"threads": chosen, "current": CURRENT_CHECKPOINT_V, "tasks": TASKS}
        by = {r["format"]: r for r in conn.execute(SELECT_ROW_FORMATS, params)}
        ck = one(conn.execute(SELECT_CHECKPOINT_FORMATS, params).fetchone())
        bad = 0 if chosen is None else one(conn.execute(SELECT_THREAD_UNDECODABLE, params).fetchone())["n"]

    def n(fmt: str, key: str = "n") -> int:
        return int((by.get(fmt) or {}).get(key) or 0)

    return Fingerprint(
        thread_id=thread_id,
        migration_version=head["migration_version"],
        shallow=False,
        checkpoints=int(ck["checkpoints"]),
        rows=sum(int(r["n"]) for r in by.values()),
        encrypted=n("encrypted"),
        encrypted_threads=n("encrypted", "threads"),
        delta_snapshots=n("delta"),
        delta_checkpoints=int(ck["delta_checkpoints"]),
        delta_threads=max(int(ck["delta_threads"]), n("delta", "threads")),
        pickle=n("pickle"),
        pickle_threads=n("pickle", "threads"),
        json=n("json"),
        undecodable=n("unknown") + int(bad),
        older_checkpoints=int(ck["older_checkpoints"]),
        pending_sends=int(ck["pending_sends"]),
        decoded=chosen is not None,
    )


# --- encrypted rows ----------------------------------------------------------------------------------------


def is_encrypted(blob_type: Any) -> bool:
    return isinstance(blob_type, str) and ENCRYPTED_MARK in blob_type


class Decryptor:
    """Decrypts `EncryptedSerializer` rows with the configured keys (the first that authenticates wins) and
    decodes the plaintext without executing anything. No keys: every encrypted row stays unreadable."""

    def __init__(self, keys: Iterable[bytes] = ()):
        from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

        keys = list(keys)
        self._ciphers = [EncryptedSerializer.from_pycryptodome_aes(key=k).cipher for k in keys]
        # The token index keys the hashes of encrypted rows' tokens with a key derived from the key set, so that
        # whoever reads the index without the keys cannot confirm a guessed value; `key_set` names the set (a hash
        # of that derived key: neither can be read back from it).
        self._index_key = hashlib.blake2b(b"\0".join(sorted(keys)), digest_size=32, person=b"lg-token-index").digest()
        self.key_set = hashlib.blake2b(self._index_key, digest_size=8).hexdigest() if keys else None

    def __bool__(self) -> bool:
        return bool(self._ciphers)

    def keyed(self, token_hash: int) -> int:
        """A token hash (core.privacy.tokens.token_hash) keyed with the key set: what the token index stores
        for the tokens of encrypted rows."""
        digest = hashlib.blake2b(token_hash.to_bytes(4, "big", signed=True), key=self._index_key, digest_size=4)
        return int.from_bytes(digest.digest(), "big", signed=True)

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


def unread(payload: Any) -> bool:
    """Whether `Decryptor.payload` gave the marker of a row it could not read."""
    return isinstance(payload, dict) and payload.get("encrypted") is True and "undecodable" in payload


def decryptor(settings: Any = None) -> Decryptor:
    """A Decryptor with the operator's keys (core.config: LANGGRAPH_AES_KEYS / LANGGRAPH_AES_KEY)."""
    if settings is None:
        from core.config import load_settings

        settings = load_settings()
    return Decryptor(settings.aes_keys)


SELECT_ENCRYPTED_WRITES = """
SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, type, blob FROM checkpoint_writes
WHERE thread_id = ANY(%(threads)s) AND type LIKE '%%+%%'"""
# The encrypted rows outside `left` (of the threads `only`, NULL: every thread); the residue scan reads them in Python.
SELECT_ENCRYPTED_ROWS = """
SELECT thread_id, type, blob FROM checkpoint_writes WHERE type LIKE '%%+%%' AND NOT (thread_id = ANY(%(left)s))
  AND (%(only)s::text[] IS NULL OR thread_id = ANY(%(only)s))
UNION ALL
SELECT thread_id, type, blob FROM checkpoint_blobs WHERE type LIKE '%%+%%' AND NOT (thread_id = ANY(%(left)s))
  AND (%(only)s::text[] IS NULL OR thread_id = ANY(%(only)s))
ORDER BY thread_id"""


def decrypted_writes(conn: Any, decryptor: Decryptor, threads: Iterable[str]) -> dict[tuple, Any]:
    """The decoded payloads of the encrypted pending writes of `threads` that a configured key opens, by
    (thread_id, checkpoint_ns, checkpoint_id, task_id, idx). Empty without keys."""
    if not decryptor:
        return {}
    out = {}
    for r in conn.execute(SELECT_ENCRYPTED_WRITES, {"threads": list(threads)}):
        payload = decryptor.payload(r["type"], r["blob"])
        if not unread(payload):
            out[(r["thread_id"], r["checkpoint_ns"], r["checkpoint_id"], r["task_id"], r["idx"])] = payload
    return out


def encrypted_texts(
    conn: Any, decryptor: Decryptor, left: Iterable[str], only: Iterable[str] | None = None
) -> tuple[dict[str, list[str]], list[str]]:
    """For every thread outside `left` (and in `only`, when given: the token index's candidates) holding encrypted
    rows: the decoded JSON text of those rows, when a configured key opens every one of them; the other threads
    are returned as not scanned."""
    texts: dict[str, list[str]] = {}
    closed: set[str] = set()
    params = {"left": sorted(set(left)), "only": None if only is None else sorted(set(only))}
    for r in conn.execute(SELECT_ENCRYPTED_ROWS, params):
        payload = decryptor.payload(r["type"], r["blob"])
        if unread(payload):
            closed.add(r["thread_id"])
        else:
            texts.setdefault(r["thread_id"], []).append(json.dumps(payload, ensure_ascii=False))
    return {t: v for t, v in texts.items() if t not in closed}, sorted(closed)


def messages_of(payload: Any) -> list[dict]:
    """The chat messages of a decoded payload, reduced as core_checkpoint_messages (migration 005) reduces them:
    {kind, id, content, tool_calls, tool_name, tool_call_id, status}, None fields left out."""
    items = payload if isinstance(payload, list) else [payload] if isinstance(payload, dict) else []
    out = []
    for x in items:
        if not isinstance(x, dict):
            continue
        if str(x.get("type", "")).startswith("langchain_core.messages.") and isinstance(x.get("value"), dict):
            v = x["value"]
            kind = v.get("type")
            if isinstance(kind, str) and kind.endswith("Chunk"):
                kind = kind.replace("MessageChunk", "").replace("AI", "ai").lower()
        elif "role" in x and "content" in x:
            v = x
            kind = {"user": "human", "assistant": "ai"}.get(x["role"], x["role"])
        else:
            continue
        calls = v.get("tool_calls") if isinstance(v.get("tool_calls"), list) and v.get("tool_calls") else None
        names = v.get("name") if kind == "tool" else ",".join(c.get("name") or "" for c in calls) if calls else None
        msg = {
            "kind": kind,
            "id": v.get("id"),
            "content": v.get("content"),
            "tool_calls": calls,
            "tool_name": names,
            "tool_call_id": v.get("tool_call_id"),
            "status": v.get("status"),
        }
        out.append({k: val for k, val in msg.items() if val is not None})
    return out


def refused_type(payload: Any) -> str | None:
    """The first object in a decoded payload marked refused (as core_refused_type names it), None when none."""
    stack = [payload]
    while stack:
        x = stack.pop(0)
        if isinstance(x, dict):
            if x.get("refused") is True:
                return f"{x['type']}.{x['method']}" if "method" in x else x.get("type")
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return None
