"""Fail-closed guard: while checkpoint persistence is degraded, risky tools do not run.

Each tool declares a risk level (READ_ONLY, LOW, HIGH, CRITICAL); a tool that declares none
counts as HIGH. `FailClosedGuard` is a LangChain v1 agent middleware that asks the saver for
its *live* state at every tool call (not a flag captured when the run started): while the
saver is degraded, HIGH and CRITICAL calls are answered with an error ToolMessage saying why,
and READ_ONLY/LOW calls run. Each denial is handed to the saver, which keeps it for the
replica-health tables (flushed when PostgreSQL is back).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool

from agent_memory_runtime import clock

log = logging.getLogger(__name__)


class Risk(StrEnum):
    """How much harm a tool call can do if its conversation's history may be lost."""

    READ_ONLY = "READ_ONLY"
    LOW = "LOW"
    HIGH = "HIGH"
    CRITICAL = "CRITICAL"

    @property
    def denied_while_degraded(self) -> bool:
        return self in (Risk.HIGH, Risk.CRITICAL)


UNDECLARED_RISK = Risk.HIGH
RISK_METADATA_KEY = "risk"

# Tool name -> risk, filled by `declare_risk` (the tool's own metadata is read first).
TOOL_RISKS: dict[str, Risk] = {}


def declare_risk(tool: BaseTool, risk: Risk) -> BaseTool:
    """Declare `tool`'s risk (in its metadata and in TOOL_RISKS); returns the tool."""
    tool.metadata = {**(tool.metadata or {}), RISK_METADATA_KEY: risk.value}
    TOOL_RISKS[tool.name] = risk
    return tool


def risk_of(tool: BaseTool | None, name: str) -> Risk:
    """The declared risk of a tool; HIGH when it declares none or declares garbage."""
    declared = (tool.metadata or {}).get(RISK_METADATA_KEY) if tool is not None else None
    if declared is None:
        declared = TOOL_RISKS.get(name)
    try:
        return Risk(declared) if declared is not None else UNDECLARED_RISK
    except ValueError:
        return UNDECLARED_RISK


@dataclass(frozen=True)
class GuardDenial:
    """One denied tool call. Kept in the denial ToolMessage's artifact and in the health tables."""

    tool: str
    risk: Risk
    thread_id: str | None
    subject_root: str | None
    subject_id: str | None
    reason: str
    denied_at: datetime = field(default_factory=clock.now)  # the demo's replayed time inside clock.simulated

    @property
    def customer_id(self) -> str | None:
        return self.subject_id if self.subject_root == "clientes" else None

    def as_row(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "risk": self.risk.value,
            "thread_id": self.thread_id,
            "subject_root": self.subject_root,
            "subject_id": self.subject_id,
            "customer_id": self.customer_id,
            "reason": self.reason,
            "denied_at": self.denied_at,
        }


class PersistenceState(Protocol):
    """What the guard needs from a saver: its live state and a place to keep denials."""

    @property
    def degraded(self) -> bool: ...

    def record_denial(self, denial: GuardDenial) -> None: ...


DENIAL_TEXT = (
    "Acción denegada: la persistencia del historial está degradada (PostgreSQL no responde) y "
    "la herramienta '{tool}' tiene riesgo {risk}. Se podrá repetir cuando se recupere; "
    "mientras tanto solo se ejecutan consultas y cambios de bajo riesgo."
)


class FailClosedGuard(AgentMiddleware):
    """Denies HIGH/CRITICAL tool calls while `state.degraded` is true, at every call."""

    def __init__(self, state: PersistenceState | Callable[[], bool]):
        super().__init__()
        self._state = state
        self._lock = threading.Lock()
        self.denials: list[GuardDenial] = []

    def _degraded(self) -> bool:
        state = self._state
        return bool(state()) if callable(state) and not hasattr(state, "degraded") else bool(state.degraded)

    def check(self, request: Any) -> ToolMessage | None:
        """The denial message for this call, or None when it may run."""
        name = request.tool_call["name"]
        risk = risk_of(request.tool, name)
        if not risk.denied_while_degraded or not self._degraded():
            return None
        runtime = request.runtime
        config = getattr(runtime, "config", None) or {}
        context = getattr(runtime, "context", None)
        denial = GuardDenial(
            tool=name,
            risk=risk,
            thread_id=config.get("configurable", {}).get("thread_id"),
            subject_root=getattr(context, "root", None),
            subject_id=getattr(context, "subject_id", None),
            reason="checkpoint persistence degraded (PostgreSQL unreachable)",
        )
        with self._lock:
            self.denials.append(denial)
        record = getattr(self._state, "record_denial", None)
        if record is not None:
            record(denial)
        log.warning("guard denied %s (%s) on thread %s: persistence degraded", name, risk.value, denial.thread_id)
        return ToolMessage(
            content=DENIAL_TEXT.format(tool=name, risk=risk.value),
            tool_call_id=request.tool_call["id"],
            name=name,
            status="error",
            artifact={"guard_denial": denial},
        )

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        denied = self.check(request)
        return denied if denied is not None else handler(request)

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        denied = self.check(request)
        return denied if denied is not None else await handler(request)
