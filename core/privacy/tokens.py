"""Tokens of checkpoint payloads, for the token index (core.privacy.token_index) and the residue scan.

Why a candidate set is complete. A token is a maximal run of [A-Za-z0-9_%] in a string *value* (JSON
escapes undone: `hola\\nC9` holds `hola` and `C9`). The residue scan's matches (`residue.token_regex`)
are bounded where the term's edge is a token character, so every token of a matched term is a token of
some decoded string, key or number of the thread. Strings, keys and numbers are read here by a msgpack
walk (ormsgpack, langgraph's own msgpack library) that never constructs an object; numbers are tokenized
in every text form the decoder's jsonb can give them, and the words the decoder adds (`type`, `value`,
`bytes`, ...) are added where it adds them. What the walk does not know (another blob type, an ext code
other than langgraph's constructors, a payload it cannot read) is tokenized from the SQL decoder's own
text. tests/test_token_index.py checks the walk against the decoder's text on real payloads.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from decimal import Decimal
from typing import Any

import ormsgpack

from core.config import term_hash_key

TOKEN = re.compile(r"[A-Za-z0-9_%]+")
# JSON escapes in the decoder's text, undone before tokenizing (their letters are not part of a token)
JSON_ESCAPE = re.compile(r'\\(?:u[0-9a-fA-F]{4}|["\\/bfnrt])')
CONSTRUCTOR_EXTS = frozenset({0, 1, 2, 3, 4, 5})  # langgraph's ext codes: [module, name, args(, method)]


def token_hash(token: str) -> int:
    """A token's 32-bit hash, the same for the index and the query (stable across processes), keyed with the
    configured secret (core.config.term_hash_key): without it, a stored hash confirms no guessed value (issue 43)."""
    digest = hashlib.blake2b(token.encode("utf-8"), key=term_hash_key(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


TERM_KEY_FINGERPRINT_LABEL = b"agent-memory token index term key fingerprint v1"


def term_key_fingerprint() -> str:
    """A fingerprint of the configured secret (an HMAC of a constant under it, 16 hex characters), never the key: the
    token index keeps it with each row, so that rows hashed under another key are known as such after a rotation."""
    return hmac.new(term_hash_key(), TERM_KEY_FINGERPRINT_LABEL, hashlib.sha256).hexdigest()[:16]


def tokens_of_text(text: str, into: set[str]) -> None:
    into.update(TOKEN.findall(text))


def tokens_of_json_text(text: str, into: set[str]) -> None:
    """Tokens of the string values of a JSON text (its escapes undone)."""
    tokens_of_text(JSON_ESCAPE.sub(" ", text), into)


def term_tokens(term: str) -> list[str]:
    """What a term is looked up by: all its tokens (GIN's fast scan skips through a frequent one)."""
    return sorted(set(TOKEN.findall(term)))


class _Unknown(Exception):
    """A msgpack value the walk does not reproduce exactly: the decoder's own text is used."""


def _number_tokens(value: float, into: set[str]) -> None:
    if value != value:
        into.add("NaN")
    elif value in (float("inf"), float("-inf")):
        into.add("Infinity")
    else:  # Python's repr and the decoder's float8 text are both shortest round-trip; jsonb prints it plain
        text = repr(value)
        tokens_of_text(text, into)
        tokens_of_text(format(Decimal(text), "f"), into)
        if value.is_integer():
            into.add(str(int(value)))


def _bytes_tokens(data: bytes | bytearray | memoryview, into: set[str]) -> None:
    """Bytes as the decoder shows them: {"type": "bytes", "value": <base64>}."""
    into.update(("type", "bytes", "value"))
    tokens_of_text(base64.b64encode(bytes(data)).decode("ascii"), into)


def _walk(value: Any, into: set[str]) -> None:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            tokens_of_text(v, into)
        elif isinstance(v, bool):
            into.add("true" if v else "false")
        elif isinstance(v, int):
            into.add(str(abs(v)))
        elif isinstance(v, float):
            _number_tokens(v, into)
        elif v is None:
            into.add("null")
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (bytes, bytearray, memoryview)):  # msgpack bin
            _bytes_tokens(v, into)
        else:
            raise _Unknown(type(v).__name__)


def _ext_hook(code: int, data: bytes) -> Any:
    if code not in CONSTRUCTOR_EXTS:
        raise _Unknown(f"ext {code}")
    # {"type": "module.Name", "value": <args>(, "method": name)}: every string of the payload, plus the keys
    return ["type", "value", "method", ormsgpack.unpackb(data, ext_hook=_ext_hook, option=ormsgpack.OPT_NON_STR_KEYS)]


def payload_tokens(blob_type: str | None, blob: bytes | None) -> set[str] | None:
    """The tokens of a (type, blob) pair as the decoder would show it, or None when only the decoder
    knows (the caller then tokenizes `core_checkpoint_payload(type, blob)::text`)."""
    into: set[str] = set()
    if blob_type == "msgpack" and blob is not None:
        try:
            _walk(ormsgpack.unpackb(bytes(blob), ext_hook=_ext_hook, option=ormsgpack.OPT_NON_STR_KEYS), into)
        except Exception:  # _Unknown, or bytes the decoder will report as undecodable
            return None
        return into
    if blob_type == "null":
        return {"null"}
    if blob_type == "empty":  # {"type": "empty", "value": null}
        return {"type", "empty", "value", "null"}
    if blob_type in ("bytes", "bytearray"):
        _bytes_tokens(blob or b"", into)
        return into
    return None
