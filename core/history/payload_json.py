"""The Python twin of the SQL decoder (core/sql/005_msgpack_decoder.sql): a checkpoint (type, blob)
pair as the same JSON shape, decoded with ormsgpack and an ext hook that **never imports or calls**
what a payload names. It is the reference of the parity tests and the baseline of the decoder
benchmark; the dashboard itself reads the SQL views.

Shape: a langgraph ext object is `{"type": "module.Name", "value": arg}` (plus `"method"` for ext 3, and
`"refused": true` when the serializer's allowlist would refuse to load it),
numpy arrays and delta snapshots wrap their decoded payload, unknown ext codes keep their bytes
(base64), `bin` is `{"type": "bytes", "value": base64}`, NaN/infinities are strings, non-string map
keys become their JSON text. Undecodable input raises `Undecodable` (SQL returns a marker instead).
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import ormsgpack

from agent_memory_runtime.serde import is_loadable

EXT_WRAPPED = {6: "numpy.ndarray", 7: "langgraph.checkpoint.serde.types._DeltaSnapshot"}
_OPTS = ormsgpack.OPT_NON_STR_KEYS


class Undecodable(ValueError):
    """The bytes are not a payload this decoder (or the SQL one) can turn into JSON."""


def _b64(data: bytes | bytearray | memoryview) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


def _ext_hook(code: int, data: bytes) -> Any:
    if 0 <= code <= 5:
        tup = ormsgpack.unpackb(data, ext_hook=_ext_hook, option=_OPTS)
        if (
            not isinstance(tup, list)
            or len(tup) not in (3, 4)
            or not isinstance(tup[0], str)
            or not isinstance(tup[1], str)
        ):
            raise Undecodable(f"ext {code} does not hold a [module, name, ...] array")
        out = {"type": f"{tup[0]}.{tup[1]}", "value": tup[2]}
        if len(tup) == 4:
            if not isinstance(tup[3], str):
                raise Undecodable(f"ext {code}: the method name is not a string")
            if code == 3:
                out["method"] = tup[3]
        # what the serializer would refuse to load (migration 021 marks it the same way in SQL)
        method = (tup[3] if len(tup) == 4 else "") if code == 3 else None
        if not is_loadable(tup[0], tup[1], method):
            out["refused"] = True
        return out
    if code in EXT_WRAPPED:
        return {"type": EXT_WRAPPED[code], "value": ormsgpack.unpackb(data, ext_hook=_ext_hook, option=_OPTS)}
    return {"type": "msgpack.ext", "code": code, "value": _b64(data)}


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, int, float)):
        text = json.dumps(_plain(key))
        return text[1:-1] if text.startswith('"') else text
    raise Undecodable(f"a {type(key).__name__} used as a map key")


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {_key(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"type": "bytes", "value": _b64(value)}
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, str) and "\x00" in value:
        raise Undecodable("a string holds a NUL character (not representable in PostgreSQL text)")
    return value


def payload_json(blob_type: str | None, blob: bytes | None) -> Any:
    """The JSON value (Python lists/dicts/scalars) of one checkpoint (type, blob) pair."""
    if blob_type == "msgpack":
        if blob is None:
            raise Undecodable("msgpack blob without bytes")
        try:
            return _plain(ormsgpack.unpackb(bytes(blob), ext_hook=_ext_hook, option=_OPTS))
        except ormsgpack.MsgpackDecodeError as exc:
            raise Undecodable(str(exc)) from exc
    if blob_type == "null":
        return None
    if blob_type == "empty":
        return {"type": "empty", "value": None}
    if blob_type in ("bytes", "bytearray"):
        return {"type": "bytes", "value": _b64(blob or b"")}
    if blob_type == "json":
        if blob is None:
            raise Undecodable("json blob without bytes")
        return json.loads(bytes(blob).decode("utf-8"))
    raise Undecodable(f"blob type {blob_type} is never decoded here")
