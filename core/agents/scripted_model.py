"""A deterministic chat model for the demo and the tests (no network, no weights).

It reads the last message and answers the way a real model would in these retail
conversations: a declared preference becomes a `recordar_preferencia` call, a question
about a supplier becomes `avisos_proveedor`, a purchasing note becomes `publicar_aviso`,
and after a tool result it closes the turn with a short reply.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

PREF_LINE = re.compile(r"^- (?P<tipo>\w+): (?P<valor>.+)$", re.M)


def _proposal(messages: list[BaseMessage], **override: str) -> dict[str, Any]:
    """What a model that applies the preferences in its prompt proposes (defaults where none)."""
    from core.agents.retail import DEFAULT_PROPOSAL, PROPOSAL_FIELDS

    system = next((str(m.content) for m in messages if isinstance(m, SystemMessage)), "")
    prefs = {m["tipo"]: m["valor"].strip() for m in PREF_LINE.finditer(system)}
    args = {field: prefs.get(tipo, DEFAULT_PROPOSAL[field]) for field, tipo in PROPOSAL_FIELDS.items()}
    return {**args, **override}


# Proposals: the customer asks how to get the order; "solo esta vez" overrides the preference.
PROPOSAL_RULES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], dict[str, str]]]] = [
    (re.compile(r"solo esta vez.* tienda (?P<v>.+?)\.?$", re.I), lambda m: {"tienda": m["v"]}),
    (re.compile(r"qué me propones", re.I), lambda m: {}),
]

# (pattern on the user's text, tool name, how to build its args from the match)
RULES: list[tuple[re.Pattern[str], str, Callable[[re.Match[str]], dict[str, Any]]]] = [
    (
        re.compile(r"recoger .* en la tienda (?P<v>.+?)\.?$", re.I),
        "recordar_preferencia",
        lambda m: {"tipo": "recogida", "valor": m["v"]},
    ),
    (
        re.compile(r"contactadme .* por (?P<v>.+?)\.?$", re.I),
        "recordar_preferencia",
        lambda m: {"tipo": "contacto", "valor": m["v"]},
    ),
    (
        re.compile(r"entregas .* franja (?P<v>.+?)\.?$", re.I),
        "recordar_preferencia",
        lambda m: {"tipo": "horario", "valor": m["v"]},
    ),
    (
        re.compile(r"atendáis en (?P<v>.+?)\.?$", re.I),
        "recordar_preferencia",
        lambda m: {"tipo": "idioma", "valor": m["v"]},
    ),
    (re.compile(r"avisos .*sobre (?P<v>.+?)\??$", re.I), "avisos_proveedor", lambda m: {"consulta": m["v"]}),
    (re.compile(r"qué preferencias tengo", re.I), "preferencias", lambda m: {}),
    (
        re.compile(
            r"^aviso (?P<t>retraso|rotura_stock|cambio_precio|promocion)(?: \((?P<min>[\d.]+) min\))?: (?P<v>.+)$", re.I
        ),
        "publicar_aviso",
        lambda m: {
            "tema": m["t"].lower(),
            "texto": m["v"],
            **({"vigencia_minutos": float(m["min"])} if m["min"] else {}),
        },
    ),
    (
        re.compile(r"^ajuste (?P<a>idioma|tienda_base|turno|notificaciones) = (?P<v>.+)$", re.I),
        "guardar_ajuste",
        lambda m: {"ajuste": m["a"].lower(), "valor": m["v"]},
    ),
]


MODEL_NAME = "scripted-retail"


def _tokens(text: str) -> int:
    return len(text) // 4 + 1  # about 4 characters a token, as hosted models count Spanish text


def with_usage(reply: AIMessage, messages: list[BaseMessage]) -> AIMessage:
    """`reply` with the usage a hosted model reports (LangChain's `usage_metadata`, model in `response_metadata`),
    deterministic: input counts every message sent, of which all but the last are a cached prefix after the first
    call of a turn; output counts the reply's text and tool calls."""
    sent = [_tokens(str(m.content)) for m in messages]
    out = _tokens(str(reply.content) + "".join(f"{c['name']}{c['args']}" for c in reply.tool_calls))
    cached = sum(sent[:-1]) if len(sent) > 2 else 0
    reply.usage_metadata = {
        "input_tokens": sum(sent),
        "output_tokens": out,
        "total_tokens": sum(sent) + out,
        "input_token_details": {"cache_read": cached},
    }
    reply.response_metadata = {**reply.response_metadata, "model_name": MODEL_NAME}
    return reply


class ScriptedChatModel(BaseChatModel):
    """Rule-based stand-in for a chat model; `bind_tools` is accepted and ignored."""

    _ids: Any = itertools.count()
    # False: a model that ignores the preferences in its prompt (memory that changes nothing).
    apply_preferences: bool = True

    @property
    def _llm_type(self) -> str:
        return MODEL_NAME

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=with_usage(self.respond(messages), messages))])

    def respond(self, messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return AIMessage(content=f"Hecho. {last.content}".strip())
        if isinstance(last, HumanMessage):
            text = str(last.content).strip()
            for pattern, override in PROPOSAL_RULES:
                m = pattern.search(text)
                if m:
                    context = messages if self.apply_preferences else []
                    call = {
                        "name": "proponer_entrega",
                        "args": _proposal(context, **override(m)),
                        "id": f"call_{next(self._ids)}",
                        "type": "tool_call",
                    }
                    return AIMessage(content="", tool_calls=[call])
            for pattern, tool_name, build in RULES:
                m = pattern.search(text)
                if m:
                    call = {"name": tool_name, "args": build(m), "id": f"call_{next(self._ids)}", "type": "tool_call"}
                    return AIMessage(content="", tool_calls=[call])
            system = next((m for m in messages if isinstance(m, SystemMessage)), None)
            hint = (
                " (con tus preferencias en cuenta)"
                if system and "Preferencias declaradas" in str(system.content)
                else ""
            )
            return AIMessage(content=f"Claro, te ayudo con eso{hint}.")
        return AIMessage(content="¿En qué puedo ayudarte?")
