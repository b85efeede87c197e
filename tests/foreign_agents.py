"""Databases written by agents we did not write (issue 10 item 6).

`write_article_agents(dsn)`: agents built from the memory article's code alone (shared/seeds/000):
stock `PostgresStore` with the article's TTLConfig, stock `PostgresSaver`, the article's
`recordar_preferencia` / `preferencias` tools and dynamic prompt as written there, `create_agent`
driven by a scripted model, app-chosen thread ids `conv-<uuid>`, the customer id only in the runtime
context and no checkpoint metadata. Nothing from `core/` is imported here: a user runs
`core.migrate` afterwards, as the tests do.

`write_agent_server(dsn)`: a database shaped like an Agent Server deployment: stock savers, runs
tagged with `config={"metadata": {"user_id", "graph_id", "assistant_id", "run_id"}}`.

Both are deterministic (uuid5 thread ids, fixed script) and take a few seconds.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Literal

from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, dynamic_prompt
from langchain.tools import ToolRuntime, tool
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.store.base import TTLConfig
from langgraph.store.postgres import PostgresStore
from psycopg_pool import ConnectionPool

NAMESPACE_UUID = uuid.UUID("6f1c1d0e-2b7a-4e39-9d0b-6a0d7f1e0a10")


@dataclass
class ContextoCliente:
    cliente_id: str
    tienda: str


# --- the article's tools and prompt, as the article writes them ------------------------------------


@tool
def recordar_preferencia(
    tipo: Literal["recogida", "contacto", "idioma", "horario"], valor: str, runtime: ToolRuntime[ContextoCliente]
) -> dict:
    """Guarda una preferencia que el cliente ha declarado explícitamente en esta conversación."""
    ns = ("clientes", runtime.context.cliente_id)
    runtime.store.put(
        ns,
        f"pref-{tipo}",
        {
            "texto": f"{tipo}: {valor}",
            "tipo": tipo,
            "valor": valor,
            "origen": "cliente",
            "hilo": runtime.config["configurable"]["thread_id"],
        },
    )
    return {"ok": True, "tipo": tipo}


@tool
def preferencias(runtime: ToolRuntime[ContextoCliente]) -> list[dict]:
    """Preferencias declaradas por el cliente en conversaciones anteriores."""
    ns = ("clientes", runtime.context.cliente_id)
    return [{"tipo": it.value["tipo"], "valor": it.value["valor"]} for it in runtime.store.search(ns, limit=10)]


@dynamic_prompt
def prompt_cliente(request: ModelRequest) -> str:
    ctx = request.runtime.context
    prefs = request.runtime.store.search(("clientes", ctx.cliente_id), limit=10)
    lineas = "\n".join(f"- {p.value['texto']}" for p in prefs) or "- (ninguna)"
    return (
        f"Atiendes al cliente {ctx.cliente_id} de la tienda {ctx.tienda}.\n"
        f"Preferencias que el cliente ha declarado en otras conversaciones:\n{lineas}\n"
        "Respétalas al proponer recogida, contacto o plazo. No las cites como si las hubieras deducido."
    )


class ModeloGuion(FakeMessagesListChatModel):
    """The article's scripted model: answers from a list; tools are accepted and ignored."""

    def bind_tools(self, tools, **kw):  # noqa: ANN001
        return self


def llamada(nombre: str, n: int, **args) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": nombre, "args": args, "id": f"call-{nombre}-{n}"}])


def build_cliente(modelo, saver, store):
    return create_agent(
        modelo,
        tools=[recordar_preferencia, preferencias],
        middleware=[prompt_cliente],
        context_schema=ContextoCliente,
        checkpointer=saver,
        store=store,
    )


# --- the script ------------------------------------------------------------------------------------

# Look-alike ids on purpose: C9 must never reach C19, C9x, C_9 or C% (LIKE metacharacters).
CUSTOMERS = ("C9", "C19", "C9x", "C_9", "C%", "C10")
TIENDAS = ("T001", "T002", "T003")


@dataclass
class Conversation:
    thread_id: str
    customer: str
    kind: str  # write (declares a preference) / read (calls `preferencias`) / chat (no tool)
    tipo: str | None = None
    valor: str | None = None


@dataclass
class ForeignDb:
    dsn: str
    conversations: list[Conversation] = field(default_factory=list)

    def threads_of(self, customer: str, kind: str | None = None) -> list[str]:
        return sorted(
            c.thread_id for c in self.conversations if c.customer == customer and (kind is None or c.kind == kind)
        )

    def declared(self, customer: str) -> dict[str, str]:
        """The customer's preferences as the store holds them (last write of each tipo wins)."""
        out: dict[str, str] = {}
        for c in self.conversations:
            if c.customer == customer and c.kind == "write":
                out[c.tipo] = c.valor
        return out


def thread_id_for(tag: str) -> str:
    return f"conv-{uuid.uuid5(NAMESPACE_UUID, tag)}"


def _values(customer: str) -> list[tuple[str, str]]:
    """Each customer's declared preferences: distinctive values plus the shared store `T002`."""
    slug = customer.replace("%", "pct").replace("_", "u")
    return [
        ("recogida", "T002"),
        ("contacto", f"correo {slug.lower()}@ejemplo.es"),
        ("horario", f"tardes de {slug} a las 17h"),
    ]


def script(shared_customers: int = 0) -> list[Conversation]:
    """Per look-alike customer: 3 preference writes, 1 read, 1 chat (5 threads). `shared_customers`
    more customers (`S000`..) each declare only `recogida: T002` (the collision test)."""
    convs: list[Conversation] = []
    for customer in CUSTOMERS:
        for n, (tipo, valor) in enumerate(_values(customer)):
            convs.append(Conversation(thread_id_for(f"{customer}/w{n}"), customer, "write", tipo, valor))
        convs.append(Conversation(thread_id_for(f"{customer}/r"), customer, "read"))
        convs.append(Conversation(thread_id_for(f"{customer}/c"), customer, "chat"))
    for i in range(shared_customers):
        convs.append(Conversation(thread_id_for(f"S{i:03d}/w"), f"S{i:03d}", "write", "recogida", "T002"))
    return convs


def _responses(conv: Conversation, n: int) -> list[AIMessage]:
    if conv.kind == "write":
        return [llamada("recordar_preferencia", n, tipo=conv.tipo, valor=conv.valor), AIMessage(content="Anotado.")]
    if conv.kind == "read":
        return [llamada("preferencias", n), AIMessage(content="Ya lo tengo en cuenta.")]
    return [AIMessage(content="¿En qué más puedo ayudarte?")]


def _user_text(conv: Conversation) -> str:
    if conv.kind == "write":
        return f"Quiero {conv.tipo}: {conv.valor}"
    if conv.kind == "read":
        return "¿Qué preferencias tengo?"
    return f"Hola, soy el cliente {conv.customer}, una pregunta sobre mi pedido"


def run_conversations(dsn: str, convs: list[Conversation], metadata_for=None) -> None:
    """Run the article's agents over `convs` in this order; `metadata_for(conv, n)`: a run's checkpoint metadata."""
    with ConnectionPool(
        dsn, min_size=1, max_size=4, open=True, kwargs={"autocommit": True, "prepare_threshold": 0}
    ) as pool:
        almacen = PostgresStore(
            pool,
            ttl=TTLConfig(
                default_ttl=60 * 24 * 365, refresh_on_read=True, omit_expired=True, sweep_interval_minutes=None
            ),
        )
        almacen.setup()
        saver = PostgresSaver(pool)
        saver.setup()
        for n, conv in enumerate(convs):
            agente = build_cliente(ModeloGuion(responses=_responses(conv, n)), saver, almacen)
            config = {"configurable": {"thread_id": conv.thread_id}}
            if metadata_for is not None:
                config["metadata"] = metadata_for(conv, n)
            agente.invoke(
                {"messages": [HumanMessage(_user_text(conv))]},
                context=ContextoCliente(conv.customer, TIENDAS[n % len(TIENDAS)]),
                config=config,
            )


def write_article_agents(dsn: str, shared_customers: int = 0) -> ForeignDb:
    """Run the article's agents on `dsn` (an empty database). Writes come before reads, so each
    `preferencias` ToolMessage holds the customer's values (a payload without any `hilo` link)."""
    convs = script(shared_customers)
    order = [c for c in convs if c.kind == "write"] + [c for c in convs if c.kind != "write"]
    run_conversations(dsn, order)
    return ForeignDb(dsn, convs)


def write_agent_server(dsn: str) -> ForeignDb:
    """Runs tagged the way LangGraph's Agent Server tags them (user_id, graph_id, assistant_id, run_id),
    with the Agent Server's own uuid thread ids."""
    convs = [
        Conversation(str(uuid.uuid5(NAMESPACE_UUID, f"as/{c.thread_id}")), c.customer, c.kind, c.tipo, c.valor)
        for c in script()
        if c.customer in ("C9", "C19", "C_9")
    ]

    def metadata(conv: Conversation, n: int) -> dict:
        return {
            "user_id": conv.customer,
            "graph_id": "cliente",
            "run_id": str(uuid.uuid5(NAMESPACE_UUID, f"run{n}")),
            "assistant_id": str(uuid.uuid5(NAMESPACE_UUID, "assistant-cliente")),
        }

    run_conversations(dsn, convs, metadata)
    return ForeignDb(dsn, convs)


__all__ = [
    "CUSTOMERS",
    "Conversation",
    "ForeignDb",
    "json",
    "run_conversations",
    "script",
    "thread_id_for",
    "write_agent_server",
    "write_article_agents",
]
