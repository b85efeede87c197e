"""Which memory documents a conversation's messages name (issue 56, item 1): pure functions over the messages the
canonical SQL decoder gives (`core_checkpoint_messages`: {kind, content, tool_calls, tool_name, tool_call_id}).

A tool call or a tool result names a document when the domain's tools put its key there: `recordar_preferencia`
(tipo, valor) writes `pref-{tipo}`; `preferencias` returns tipo and valor pairs (a JSON list of {tipo, valor}, as
the memory article's tool returns them, or `- tipo: valor` lines, as ours do), each read from `pref-{tipo}`;
`guardar_ajuste` / `ajuste` write and read `ajuste-{ajuste}`; `publicar_aviso` writes `aviso-{tema}`. The
namespace's id is never in a message (the runtime context gives it to the tool): it is found afterwards
(core.history.answer_context). A tool result that names no document (`avisos_proveedor`'s texts) names none here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# tool -> (root, key template, the argument giving the key, the argument holding the value written)
WRITERS: dict[str, tuple[str, str, str, str]] = {
    "recordar_preferencia": ("clientes", "pref-{}", "tipo", "valor"),
    "guardar_ajuste": ("empleados", "ajuste-{}", "ajuste", "valor"),
    "publicar_aviso": ("proveedores", "aviso-{}", "tema", "texto"),
}
# tool -> (root, key template, the argument giving the key): the result is the document's value
KEY_READERS: dict[str, tuple[str, str, str]] = {"ajuste": ("empleados", "ajuste-{}", "ajuste")}
# tool -> (root, key template, field naming the key, field holding the value): the result lists documents
LIST_READERS: dict[str, tuple[str, str, str, str]] = {"preferencias": ("clientes", "pref-{}", "tipo", "valor")}

LINE = re.compile(r"^\s*-\s*([^:\n]+?)\s*:\s*(.*?)\s*$")
MAX_KEY_PART = 200  # a key part longer than this is no key the tools write


@dataclass(frozen=True)
class Reference:
    """One mention of a document: `root` and `key` (the namespace's id is not in the message), the `tool`, `via`
    "call" (its arguments) or "result" (its answer), the message's `position` (0-based) in the context, `access`
    "write" or "read", and `value` the value written or read as the message says it (None when it says none)."""

    root: str
    key: str
    tool: str
    via: str
    position: int
    access: str
    value: str | None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _key(template: str, part: Any) -> str | None:
    if not isinstance(part, str) or not part or len(part) > MAX_KEY_PART or "\x00" in part:
        return None
    return template.format(part)


def _listed(content: Any, name_field: str, value_field: str) -> list[tuple[str, str | None]]:
    """(key part, value) pairs of a listing result: a JSON list of objects, or `- name: value` lines."""
    items: Any = content
    if isinstance(content, str):
        try:
            items = json.loads(content)
        except ValueError:
            return [(m.group(1), m.group(2)) for line in content.splitlines() if (m := LINE.match(line))]
    if not isinstance(items, list):
        return []
    return [
        (item[name_field], _text(item.get(value_field)))
        for item in items
        if isinstance(item, dict) and isinstance(item.get(name_field), str)
    ]


def references(messages: list[dict[str, Any]]) -> list[Reference]:
    """Every document the messages name, in message order (a result is matched to its call by `tool_call_id`)."""
    calls: dict[str, dict[str, Any]] = {}
    out: list[Reference] = []
    for position, msg in enumerate(messages):
        if msg.get("kind") == "ai":
            for call in msg.get("tool_calls") or []:
                if not isinstance(call, dict):
                    continue
                name, args = call.get("name"), call.get("args")
                if not isinstance(args, dict):
                    continue
                if isinstance(call.get("id"), str):
                    calls[call["id"]] = call
                if name in WRITERS:
                    root, template, key_arg, value_arg = WRITERS[name]
                    key = _key(template, args.get(key_arg))
                    if key:
                        out.append(Reference(root, key, name, "call", position, "write", _text(args.get(value_arg))))
        elif msg.get("kind") == "tool":
            name = msg.get("tool_name")
            call = calls.get(msg.get("tool_call_id") or "", {})
            if name in KEY_READERS:
                root, template, key_arg = KEY_READERS[name]
                key = _key(template, (call.get("args") or {}).get(key_arg))
                if key:
                    out.append(Reference(root, key, name, "result", position, "read", _text(msg.get("content"))))
            elif name in LIST_READERS:
                root, template, name_field, value_field = LIST_READERS[name]
                for part, value in _listed(msg.get("content"), name_field, value_field):
                    key = _key(template, part)
                    if key:
                        out.append(Reference(root, key, name, "result", position, "read", value))
    return out
