"""The retail agents: tools, prompt and middleware, built with LangChain's `create_agent`.

The namespace a tool writes to always comes from the runtime context (who the
conversation is about), never from the model's arguments. Every tool returns an
empty string instead of raising when the agent runs without a store.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, ClassVar, Literal

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest
from langchain.tools import ToolRuntime, tool
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import SystemMessage, ToolMessage
from langgraph.config import get_config
from langgraph.store.base import BaseStore
from langgraph.store.postgres import PostgresStore
from psycopg_pool import ConnectionPool

from agent_memory_runtime import clock
from agent_memory_runtime.guard import FailClosedGuard, Risk, declare_risk
from core.db import CONNECTION_ERRORS
from core.memory.store import (
    TipoPreferencia,
    get_memory,
    put_memory,
    search_memory,
    validate_label,
)

log = logging.getLogger(__name__)

AVISO_MIN_SCORE = 0.4  # semantic matches at or below this are noise

TemaAviso = Literal["retraso", "rotura_stock", "cambio_precio", "promocion"]
AjusteEmpleado = Literal["idioma", "tienda_base", "turno", "notificaciones"]


# Who a conversation is about. `root` + `subject_id` give the namespace every tool writes to.
@dataclass(frozen=True)
class ContextoCliente:
    cliente_id: str
    agente: str = "atencion-cliente"
    # the store the conversation is held for, as the memory article's context has it (`tienda`); run_turn puts it in
    # checkpoint metadata, where the dashboard reads which store each customer belongs to (issue 39)
    tienda: str | None = None
    root: ClassVar[str] = "clientes"
    subject_id = property(attrgetter("cliente_id"))


@dataclass(frozen=True)
class ContextoProveedor:
    proveedor_id: str
    agente: str = "compras"
    root: ClassVar[str] = "proveedores"
    subject_id = property(attrgetter("proveedor_id"))


@dataclass(frozen=True)
class ContextoEmpleado:
    empleado_id: str
    agente: str = "ajustes-personal"
    root: ClassVar[str] = "empleados"
    subject_id = property(attrgetter("empleado_id"))


Contexto = ContextoCliente | ContextoProveedor | ContextoEmpleado


def namespace_of(context: Contexto) -> tuple[str, str]:
    return (context.root, validate_label(context.subject_id, f"{context.root} id"))


def _thread_id(runtime: ToolRuntime[Any, Any]) -> str | None:
    return (runtime.config or {}).get("configurable", {}).get("thread_id")


# --- customer agent -----------------------------------------------------------------------


@tool
def recordar_preferencia(tipo: TipoPreferencia, valor: str, runtime: ToolRuntime[ContextoCliente]) -> str:
    """Guarda una preferencia que el cliente ha declarado explícitamente en esta conversación."""
    if runtime.store is None:
        return ""
    ns = namespace_of(runtime.context)
    value = {"tipo": tipo, "valor": valor, "texto": f"{tipo}: {valor}"}
    put_memory(runtime.store, ns, f"pref-{tipo}", value, thread_id=_thread_id(runtime), agent=runtime.context.agente)
    return f"Preferencia guardada ({tipo})."


def _preferences_text(store: BaseStore | None, context: ContextoCliente) -> str:
    if store is None:
        return ""
    items = search_memory(store, namespace_of(context), limit=20)
    return "\n".join(f"- {i.value.get('tipo', i.key)}: {i.value.get('valor', '')}" for i in items)


@tool
def preferencias(runtime: ToolRuntime[ContextoCliente]) -> str:
    """Devuelve las preferencias guardadas del cliente de esta conversación."""
    return _preferences_text(runtime.store, runtime.context)


@tool
def avisos_proveedor(consulta: str, runtime: ToolRuntime[ContextoCliente]) -> str:
    """Busca avisos de proveedores (retrasos, roturas de stock, precios, promociones) relacionados con la consulta."""
    if runtime.store is None:
        return ""
    hits = search_memory(runtime.store, ("proveedores",), query=consulta, limit=5)
    texts = [h.value.get("texto", "") for h in hits if (h.score or 0) > AVISO_MIN_SCORE]
    # the same notice from several suppliers (one document each) is told once, best match first
    return "\n".join(f"- {text}" for text in dict.fromkeys(texts))


DEFAULT_PROPOSAL = {"tienda": "Gran Vía", "canal": "correo electrónico", "franja": "de mañana"}
# Which preference each proposal field should follow.
PROPOSAL_FIELDS = {"tienda": "recogida", "canal": "contacto", "franja": "horario"}


@tool
def proponer_entrega(tienda: str, canal: str, franja: str, runtime: ToolRuntime[ContextoCliente]) -> str:
    """Propone al cliente cómo recibir su pedido: tienda de recogida, canal de aviso y franja horaria."""
    return f"Propuesta enviada: recogida en {tienda}, aviso por {canal}, franja {franja}."


def _prompt_text(request: ModelRequest) -> str:
    base = "Eres el asistente de atención al cliente de una cadena de tiendas."
    context = request.runtime.context
    if not isinstance(context, ContextoCliente):
        return base
    try:
        prefs = _preferences_text(request.runtime.store, context)
    except CONNECTION_ERRORS as exc:  # the conversation goes on without its memory
        log.warning("memory unavailable, prompt without preferences: %s", exc)
        prefs = ""
    if not prefs:
        return base
    return (
        f"{base}\nPreferencias declaradas por el cliente (aplícalas en tus propuestas sin citarlas ni "
        f"mencionar que las recuerdas):\n{prefs}"
    )


class PromptConPreferencias(AgentMiddleware):
    """The system prompt with the customer's saved preferences. The async path reads them on a worker thread: served
    by an async server (Aegra, tests/test_aegra.py), a sync store read on the event loop's thread is refused
    (AsyncPostgresStore raises InvalidStateError) and every run failed; langchain's sync `dynamic_prompt` did that."""

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(request.override(system_message=SystemMessage(content=_prompt_text(request))))

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        text = await asyncio.to_thread(_prompt_text, request)
        return await handler(request.override(system_message=SystemMessage(content=text)))


prompt_con_preferencias = PromptConPreferencias()


# --- purchasing and staff agents ----------------------------------------------------------


@tool
def publicar_aviso(
    tema: TemaAviso, texto: str, runtime: ToolRuntime[ContextoProveedor], vigencia_minutos: float | None = None
) -> str:
    """Publica un aviso del proveedor para los agentes de tienda. Sustituye el anterior del mismo tema.
    `vigencia_minutos` acorta la caducidad cuando el aviso deja de valer antes que la política general."""
    if runtime.store is None:
        return ""
    ns = namespace_of(runtime.context)
    put_memory(
        runtime.store,
        ns,
        f"aviso-{tema}",
        {"tema": tema, "texto": texto},
        thread_id=_thread_id(runtime),
        agent=runtime.context.agente,
        valid_for_minutes=vigencia_minutos,
    )
    return f"Aviso publicado ({tema})."


@tool
def guardar_ajuste(ajuste: AjusteEmpleado, valor: str, runtime: ToolRuntime[ContextoEmpleado]) -> str:
    """Guarda un ajuste del empleado (idioma, tienda base, turno, notificaciones)."""
    if runtime.store is None:
        return ""
    ns = namespace_of(runtime.context)
    put_memory(
        runtime.store,
        ns,
        f"ajuste-{ajuste}",
        {"ajuste": ajuste, "valor": valor, "texto": f"{ajuste}: {valor}"},
        thread_id=_thread_id(runtime),
        agent=runtime.context.agente,
    )
    return f"Ajuste guardado ({ajuste})."


@tool
def ajuste(ajuste: AjusteEmpleado, runtime: ToolRuntime[ContextoEmpleado]) -> str:
    """Lee un ajuste guardado del empleado."""
    if runtime.store is None:
        return ""
    item = get_memory(runtime.store, namespace_of(runtime.context), f"ajuste-{ajuste}")
    return "" if item is None else str(item.value.get("valor", ""))


# --- conversation log -----------------------------------------------------------------------

UPSERT_CONVERSATION = """
INSERT INTO core_conversations (thread_id, agent, subject_root, subject_id, started_at, last_turn_at, turns)
VALUES (%(thread_id)s, %(agent)s, %(root)s, %(subject)s, %(now)s, %(now)s, 1)
ON CONFLICT (thread_id) DO UPDATE
SET last_turn_at = GREATEST(core_conversations.last_turn_at, EXCLUDED.last_turn_at),
    turns = core_conversations.turns + 1"""


class RegistroConversacion(AgentMiddleware):
    """Records each turn of a conversation in `core_conversations` (thread, agent, subject)."""

    def before_agent(self, state: Any, runtime: Any) -> None:
        store = runtime.store
        if not isinstance(store, PostgresStore):
            return None
        context = runtime.context
        params = {
            "thread_id": get_config().get("configurable", {}).get("thread_id"),
            "agent": context.agente,
            "root": context.root,
            "subject": context.subject_id,
            "now": clock.now(),
        }
        try:
            if isinstance(store.conn, ConnectionPool):
                with store.conn.connection() as conn:
                    conn.execute(UPSERT_CONVERSATION, params)
            else:
                store.conn.execute(UPSERT_CONVERSATION, params)
        except CONNECTION_ERRORS as exc:  # a lost log row must not end the conversation
            log.warning("conversation %s not logged, database unavailable: %s", params["thread_id"], exc)
        return None


MEMORY_DOWN = "La memoria no está disponible ahora mismo: no se ha leído ni guardado nada."


class MemoriaNoDisponible(AgentMiddleware):
    """A store outage must not end the conversation: the tool call answers that memory is
    unavailable (status error, so the model knows nothing was saved) and the agent goes on."""

    def _unavailable(self, request: Any, exc: BaseException) -> ToolMessage:
        log.warning("tool %s: memory unavailable: %s", request.tool_call["name"], exc)
        return ToolMessage(
            content=MEMORY_DOWN, tool_call_id=request.tool_call["id"], name=request.tool_call["name"], status="error"
        )

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        try:
            return handler(request)
        except CONNECTION_ERRORS as exc:
            return self._unavailable(request, exc)

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        try:
            return await handler(request)
        except CONNECTION_ERRORS as exc:
            return self._unavailable(request, exc)


# --- risk of each tool, for the fail-closed guard (an undeclared tool counts as HIGH) ------
# LOW: one reversible write about the conversation's own subject. HIGH: a write every store's
# agents act on (a supplier notice reaches every customer conversation).
declare_risk(recordar_preferencia, Risk.LOW)
declare_risk(preferencias, Risk.READ_ONLY)
declare_risk(avisos_proveedor, Risk.READ_ONLY)
declare_risk(proponer_entrega, Risk.LOW)
declare_risk(publicar_aviso, Risk.HIGH)
declare_risk(guardar_ajuste, Risk.LOW)
declare_risk(ajuste, Risk.READ_ONLY)


# --- building and running -------------------------------------------------------------------

AGENTS: dict[str, tuple[type, list, str]] = {
    "atencion-cliente": (ContextoCliente, [recordar_preferencia, preferencias, avisos_proveedor, proponer_entrega], ""),
    "compras": (ContextoProveedor, [publicar_aviso], "Eres el agente de compras: registra los avisos de proveedores."),
    "ajustes-personal": (ContextoEmpleado, [guardar_ajuste, ajuste], "Eres el asistente del personal de tienda."),
}


def build_agent(
    kind: str,
    model: BaseChatModel,
    *,
    store: BaseStore | None,
    checkpointer: Any = None,
    guard: FailClosedGuard | None = None,
    middleware: Sequence[AgentMiddleware] = (),
):
    """A compiled agent of `kind` (a key of AGENTS) on the given store and checkpointer.

    With a dual checkpoint saver (anything exposing a live `degraded` state) the fail-closed
    guard is added on it unless `guard` is given. `middleware` is added after ours (e.g. LangChain's
    HumanInTheLoopMiddleware, which pauses the thread with langgraph's `interrupt()`).
    """
    context_schema, tools, system_prompt = AGENTS[kind]
    extra, middleware = middleware, [RegistroConversacion(), MemoriaNoDisponible()]
    if context_schema is ContextoCliente:
        middleware.append(prompt_con_preferencias)
    if guard is None and hasattr(checkpointer, "degraded") and hasattr(checkpointer, "record_denial"):
        guard = FailClosedGuard(checkpointer)
    if guard is not None:
        middleware.append(guard)
    return create_agent(
        model,
        tools=tools,
        system_prompt=system_prompt or None,
        middleware=[*middleware, *extra],
        context_schema=context_schema,
        checkpointer=checkpointer,
        store=store,
        name=kind,
    )


METADATA_KEY = {"clientes": "cliente_id", "proveedores": "proveedor_id", "empleados": "empleado_id"}
STORE_KEY = "tienda"  # checkpoint metadata: the store a customer's conversation is held for


def run_turn(
    agent: Any, context: Contexto, thread_id: str, text: str, *, interrupt_before: Sequence[str] | None = None
) -> dict:
    """One user turn. The subject's id goes into checkpoint metadata (erasure finds threads by it), with the store of a
    customer's conversation when the context names one; inside `agent_memory_runtime.clock.simulated` (the demo) so
    does the replayed time, `core_replayed_at`. `interrupt_before`: nodes to stop before (langgraph's static
    breakpoint given at run time, e.g. ["tools"]; resumed with `invoke(None, config)`)."""
    validate_label(thread_id, "thread id")
    config = {
        "configurable": {"thread_id": thread_id},
        "metadata": {METADATA_KEY[context.root]: context.subject_id, "agente": context.agente},
    }
    tienda = getattr(context, "tienda", None)
    if tienda is not None:  # the store of a customer's conversation (core.memory.customer_stores reads it)
        config["metadata"][STORE_KEY] = tienda
    replayed = clock.simulated_now()
    if replayed is not None:  # the demo replays past days: tool-call extraction dates the run by it
        config["metadata"]["core_replayed_at"] = replayed.isoformat()
    stop = {"interrupt_before": list(interrupt_before)} if interrupt_before else {}
    return agent.invoke({"messages": [{"role": "user", "content": text}]}, config=config, context=context, **stop)
