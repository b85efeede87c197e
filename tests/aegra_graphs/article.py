"""An agent built from the memory article alone (tests/foreign_agents.py: its tools, prompt and context), as Aegra
serves it, with a rule-based model: "Quiero <tipo>: <valor>" calls `recordar_preferencia`, "¿Qué preferencias
tengo?" calls `preferencias`, anything else gets an answer. A message containing "espera <s>" makes the model take
<s> seconds first (a slow model call: what a cancelled run, or a server killed mid-run, interrupts).

The article's prompt reads the store synchronously: served by an async server, that read on the event loop's thread is
refused (AsyncPostgresStore raises InvalidStateError, every run fails). Its async twin here reads the same documents
with `asearch` and says the same words."""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from typing import Any

from foreign_agents import ContextoCliente, preferencias, recordar_preferencia
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, dynamic_prompt
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

QUIERO = re.compile(r"Quiero (recogida|contacto|idioma|horario): (.+)")
ESPERA = re.compile(r"espera (\d+(?:\.\d+)?)")


class ModeloReglas(BaseChatModel):
    """Deterministic stand-in for a chat model; tools are accepted and ignored."""

    _ids: Any = itertools.count()

    @property
    def _llm_type(self) -> str:
        return "modelo-reglas"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ModeloReglas:
        return self

    def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return AIMessage(content="Anotado.")
        text = str(last.content) if isinstance(last, HumanMessage) else ""
        if m := QUIERO.search(text):
            args = {"tipo": m.group(1), "valor": m.group(2).strip()}
            call = {"name": "recordar_preferencia", "args": args, "id": f"call-{next(self._ids)}", "type": "tool_call"}
            return AIMessage(content="", tool_calls=[call])
        if "preferencias tengo" in text:
            call = {"name": "preferencias", "args": {}, "id": f"call-{next(self._ids)}", "type": "tool_call"}
            return AIMessage(content="", tool_calls=[call])
        return AIMessage(content="¿En qué más puedo ayudarte?")

    def _delay(self, messages: list[BaseMessage]) -> float:
        last = messages[-1]
        m = ESPERA.search(str(last.content)) if isinstance(last, HumanMessage) else None
        return float(m.group(1)) if m else 0.0

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        time.sleep(self._delay(messages))
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        await asyncio.sleep(self._delay(messages))  # cancellable, as a real model call over HTTP is
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])


@dynamic_prompt
async def prompt_cliente(request: ModelRequest) -> str:
    ctx = request.runtime.context
    prefs = await request.runtime.store.asearch(("clientes", ctx.cliente_id), limit=10)
    lineas = "\n".join(f"- {p.value['texto']}" for p in prefs) or "- (ninguna)"
    return (
        f"Atiendes al cliente {ctx.cliente_id} de la tienda {ctx.tienda}.\n"
        f"Preferencias que el cliente ha declarado en otras conversaciones:\n{lineas}\n"
        "Respétalas al proponer recogida, contacto o plazo. No las cites como si las hubieras deducido."
    )


graph = create_agent(
    ModeloReglas(),
    tools=[recordar_preferencia, preferencias],
    middleware=[prompt_cliente],
    context_schema=ContextoCliente,
)
