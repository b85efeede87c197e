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
    # The same enum under the names older payloads carry: before the agents' library (core.checkpoints.guard) and
    # before core/ was split (core.guard). The dashboard keeps both modules; an agent without it refuses them.
    ("core.checkpoints.guard", "Risk"),
    ("core.guard", "Risk"),
)


def allowlist_rows() -> list[tuple[str, str, str, str]]:
    """Everything this serializer loads, as (module, name, method, source) rows: our pairs, langgraph's
    SAFE_MSGPACK_TYPES (constructors, method '') and SAFE_MSGPACK_METHODS. The one source of
    `core_serde_allowlist`, which the SQL decoder reads to mark refused payloads (migration 021)."""
    rows = {(m, n, "", "core") for m, n in ALLOWED_MSGPACK_MODULES}
    rows |= {(m, n, "", "langgraph") for m, n in lg_msgpack.SAFE_MSGPACK_TYPES if (m, n) not in ALLOWED_MSGPACK_MODULES}
    rows |= {(m, n, meth, "langgraph") for m, n, meth in lg_msgpack.SAFE_MSGPACK_METHODS}
    return sorted(rows)


def is_loadable(module: str, name: str, method: str | None = None) -> bool:
    """Whether our serializer would rebuild this ext: a method call (ext 3) only if langgraph lists the
    method as safe, any other constructor if it is in the allowlist."""
    if method is not None:
        return (module, name, method) in lg_msgpack.SAFE_MSGPACK_METHODS
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
        key = (module, name)
        return key in lg_msgpack.SAFE_MSGPACK_TYPES or (isinstance(allowed, set) and key in allowed)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        type_ = data[0]
        if type_ == "pickle":
            self._refuse(SerdeRefusal(module="", name="pickle", kind="pickle"))
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
