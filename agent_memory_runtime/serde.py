"""The checkpoint serializer: langgraph's `JsonPlusSerializer`, strict, with our allowlist.

Loading a checkpoint payload can construct objects: a msgpack "constructor" extension names a
`(module, callable)` that the permissive default imports and calls (GHSA-g48c-2wqr-h844). Here
only the pairs in `ALLOWED_MSGPACK_MODULES` (plus langgraph's own `SAFE_MSGPACK_TYPES`) are
rebuilt, there is no pickle fallback, and a payload naming anything else is **refused**: the
load raises `SerializationRefused` naming `module.Class`, the refusal is counted and logged
for the replica-health tables, and nothing from the payload is imported or called.

langgraph's strict mode itself only emits a `msgpack_blocked` serde event and returns the raw
argument in place of the object; we listen to that event for the load running in this thread
or task (a context variable) and turn it into the exception.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde import _msgpack as lg_msgpack
from langgraph.checkpoint.serde.event_hooks import SerdeEvent, register_serde_event_listener
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from agent_memory_runtime import clock, metrics

log = logging.getLogger(__name__)

# What the retail agents' checkpoints contain, found by running them (tests/test_serde.py
# re-runs the agents, a guard denial included, and fails if they need a pair that is not
# here): the message classes of their state, the `Send` packets of the tool node, and the
# guard's risk level, which a denied tool call leaves in its ToolMessage artifact (pydantic
# dumps the denial record itself as a dict). Each entry is a callable that *will be called*
# on load, so only plain data constructors belong here.
ALLOWED_MSGPACK_MODULES: tuple[tuple[str, str], ...] = (
    ("langchain_core.messages.human", "HumanMessage"),
    ("langchain_core.messages.ai", "AIMessage"),
    ("langchain_core.messages.tool", "ToolMessage"),
    ("langchain_core.messages.system", "SystemMessage"),
    ("langchain_core.messages.modifier", "RemoveMessage"),
    ("langgraph.types", "Send"),
    ("agent_memory_runtime.guard", "Risk"),
)

# Types our older payloads name by a path that no longer exists: (old module, name) -> the module it is in now,
# which must be allowlisted with the same name. The enum was `core.checkpoints.guard.Risk` before the agents'
# library and `core.guard.Risk` before core/ was split. A payload is rewritten to the current name before
# langgraph's ext hook sees it (the hook checks the allowlist, then imports): nothing is imported under an old name.
RENAMED_MSGPACK_TYPES: dict[tuple[str, str], str] = {
    ("core.checkpoints.guard", "Risk"): "agent_memory_runtime.guard",
    ("core.guard", "Risk"): "agent_memory_runtime.guard",
}
_OLD_MODULES = tuple({module.encode() for module, _ in RENAMED_MSGPACK_TYPES})
_NAMED_EXTS = frozenset(range(6))  # ext 0-2, 4, 5 constructors, 3 a method: payload [module, name, ...]
_MSGPACK_EXTS = frozenset(range(8))  # langgraph's ext codes; 6 (numpy) and 7 (delta) carry msgpack without a name


def _renamed_ext(code: int, data: bytes) -> ormsgpack.Ext:
    """One ext with every (old module, name) inside it, at any depth, renamed; the rest kept as it was."""
    if code not in _MSGPACK_EXTS:
        return ormsgpack.Ext(code, data)
    inner = ormsgpack.unpackb(data, ext_hook=_renamed_ext, option=ormsgpack.OPT_NON_STR_KEYS)
    if code in _NAMED_EXTS and isinstance(inner, list) and len(inner) >= 2:
        module, name = inner[0], inner[1]
        if isinstance(module, str) and isinstance(name, str) and (module, name) in RENAMED_MSGPACK_TYPES:
            inner[0] = RENAMED_MSGPACK_TYPES[(module, name)]
    return ormsgpack.Ext(code, ormsgpack.packb(inner, option=ormsgpack.OPT_NON_STR_KEYS))


def rename_old_types(data: bytes) -> bytes:
    """A msgpack payload with the old type names of `RENAMED_MSGPACK_TYPES` replaced by the current ones. Decodes
    only to plain values and ext envelopes (imports and calls nothing), and only when an old module's name occurs
    in the bytes at all; a payload it cannot parse is returned as it was, for langgraph to load or reject."""
    if not any(old in data for old in _OLD_MODULES):
        return data
    try:
        value = ormsgpack.unpackb(data, ext_hook=_renamed_ext, option=ormsgpack.OPT_NON_STR_KEYS)
        return ormsgpack.packb(value, option=ormsgpack.OPT_NON_STR_KEYS)
    except (ormsgpack.MsgpackDecodeError, ormsgpack.MsgpackEncodeError, TypeError, ValueError):
        return data


def allowlist_rows() -> list[tuple[str, str, str, str]]:
    """Everything this serializer loads, as (module, name, method, source) rows: our pairs, langgraph's
    SAFE_MSGPACK_TYPES (constructors, method '') and SAFE_MSGPACK_METHODS, and our types' old names (source
    'renamed': they load as the current type). The one source of
    `core_serde_allowlist`, which the SQL decoder reads to mark refused payloads (migration 021)."""
    rows = {(m, n, "", "core") for m, n in ALLOWED_MSGPACK_MODULES}
    rows |= {(m, n, "", "renamed") for m, n in RENAMED_MSGPACK_TYPES}
    rows |= {(m, n, "", "langgraph") for m, n in lg_msgpack.SAFE_MSGPACK_TYPES if (m, n) not in ALLOWED_MSGPACK_MODULES}
    rows |= {(m, n, meth, "langgraph") for m, n, meth in lg_msgpack.SAFE_MSGPACK_METHODS}
    return sorted(rows)


def is_loadable(module: str, name: str, method: str | None = None) -> bool:
    """Whether our serializer would rebuild this ext: a method call (ext 3) only if langgraph lists the
    method as safe, any other constructor if it is in the allowlist."""
    if method is not None:
        return (module, name, method) in lg_msgpack.SAFE_MSGPACK_METHODS
    module = RENAMED_MSGPACK_TYPES.get((module, name), module)
    return (module, name) in lg_msgpack.SAFE_MSGPACK_TYPES or (module, name) in ALLOWED_MSGPACK_MODULES


MAX_PENDING_REFUSALS = 10_000  # kept for the health tables until flushed; oldest dropped beyond


class SerializationRefused(ValueError):
    """A checkpoint payload names a type outside the allowlist; nothing was imported or called."""

    def __init__(self, refusal: SerdeRefusal):
        self.refusal = refusal
        super().__init__(
            f"refused to deserialize checkpoint payload: {refusal.qualified_name} is not in the "
            f"serializer allowlist ({refusal.kind}); nothing was imported or called"
        )


@dataclass
class SerdeRefusal:
    """One refused load. `thread_id`/`checkpoint_id` are filled in by the saver when known."""

    module: str
    name: str
    kind: str  # msgpack_blocked, msgpack_method_blocked, json_blocked, pickle
    method: str | None = None
    refused_at: datetime = field(default_factory=clock.now)  # the demo's replayed time inside clock.simulated
    thread_id: str | None = None
    checkpoint_id: str | None = None
    key: str = field(default_factory=lambda: str(uuid.uuid4()))  # makes a retried health write a no-op

    @property
    def qualified_name(self) -> str:
        base = f"{self.module}.{self.name}" if self.module else self.name
        return f"{base}.{self.method}" if self.method else base


class RefusalLog:
    """Counts refusals and keeps them until the replica-health flush drains them. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.total = 0
        self._pending: deque[SerdeRefusal] = deque(maxlen=MAX_PENDING_REFUSALS)

    def record(self, refusal: SerdeRefusal) -> None:
        metrics.refused(refusal.kind)
        with self._lock:
            self.total += 1
            self._pending.append(refusal)

    def pending(self) -> list[SerdeRefusal]:
        with self._lock:
            return list(self._pending)

    def drain(self) -> list[SerdeRefusal]:
        with self._lock:
            items = list(self._pending)
            self._pending.clear()
            return items

    def restore(self, items: Iterable[SerdeRefusal]) -> None:
        """Put back refusals whose flush failed (they go first, in their order)."""
        with self._lock:
            self._pending.extendleft(reversed(list(items)))


# Process-wide: every serializer made here shares it unless given its own.
REFUSALS = RefusalLog()

# The events blocked during the load running in this thread/task; None outside a load.
_blocked: contextvars.ContextVar[list[SerdeEvent] | None] = contextvars.ContextVar("serde_blocked", default=None)


def _on_serde_event(event: SerdeEvent) -> None:
    if event.get("kind") not in ("msgpack_blocked", "msgpack_method_blocked"):
        return
    blocked = _blocked.get()
    if blocked is not None:
        blocked.append(event)


register_serde_event_listener(_on_serde_event)


class AllowlistSerializer(JsonPlusSerializer):
    """`JsonPlusSerializer` that raises `SerializationRefused` instead of half-decoding.

    Clones made by `with_msgpack_allowlist` (what `StateGraph.compile` asks savers for in strict
    mode) are of this class too and share the same refusal log.
    """

    def __init__(
        self, *, allowed: Iterable[tuple[str, ...]] = ALLOWED_MSGPACK_MODULES, refusals: RefusalLog | None = None
    ) -> None:
        super().__init__(pickle_fallback=False, allowed_msgpack_modules=tuple(allowed))
        self.refusals = refusals or REFUSALS

    def is_allowed(self, module: str, name: str) -> bool:
        allowed = self._allowed_msgpack_modules
        key = (RENAMED_MSGPACK_TYPES.get((module, name), module), name)
        return key in lg_msgpack.SAFE_MSGPACK_TYPES or (isinstance(allowed, set) and key in allowed)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        type_ = data[0]
        if type_ == "pickle":
            self._refuse(SerdeRefusal(module="", name="pickle", kind="pickle"))
        if type_ == "msgpack":
            data = (type_, rename_old_types(data[1]))
        token = _blocked.set([])
        try:
            value = super().loads_typed(data)
            blocked = _blocked.get()
        finally:
            _blocked.reset(token)
        if blocked:
            first = blocked[0]
            kind = "json_blocked" if type_ == "json" else first["kind"]
            self._refuse(SerdeRefusal(first["module"], first["name"], kind, method=first.get("method")))
        return value

    def _reviver(self, value: dict[str, Any]) -> Any:
        # Old "json" payloads: an lc:2 constructor outside the allowlist is refused, not revived.
        if value.get("lc") == 2 and value.get("type") == "constructor" and value.get("id"):
            *module, name = value["id"]
            if not self.is_allowed(".".join(module), name):
                blocked = _blocked.get()
                if blocked is not None:
                    blocked.append({"kind": "json_blocked", "module": ".".join(module), "name": name})
                return None
        return super()._reviver(value)

    def _refuse(self, refusal: SerdeRefusal) -> None:
        self.refusals.record(refusal)
        log.warning("checkpoint payload refused: %s (%s)", refusal.qualified_name, refusal.kind)
        raise SerializationRefused(refusal)


def make_serializer(extra: Iterable[tuple[str, ...]] = ()) -> AllowlistSerializer:
    """Our serializer; `extra` adds (module, callable) pairs (each will be called on load)."""
    return AllowlistSerializer(allowed=(*ALLOWED_MSGPACK_MODULES, *extra))


def refusal_count() -> int:
    """Refusals recorded in this process since it started (all serializers sharing REFUSALS)."""
    return REFUSALS.total
