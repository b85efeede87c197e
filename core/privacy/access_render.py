"""The access export as the file handed to the customer: JSON (`export_json`) or HTML that prints to PDF
(`export_html`), in Spanish or English, from a `core.privacy.access_report.AccessReport` and the art. 15 information
(`core.privacy.access_notice.Notice`) in the requester's language."""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime, tzinfo
from typing import Any

from babel.dates import format_datetime
from babel.numbers import format_decimal

from core.history.tool_calls import args_in_words
from core.privacy.access_notice import Notice
from core.privacy.access_report import AccessReport

FORMATS = ("json", "html")
LANGS = ("es", "en")
LOCAL_OPERATORS = ("local",)  # the operator of local mode (no identity provider): no one's name


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (bytes, memoryview)):
        raise TypeError("raw bytes never go into an access export")
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def export_document(report: AccessReport, *, requested_by: str, lang: str = "es", notice: Notice) -> dict[str, Any]:
    """The export as a JSON-ready dict: a cover (who asked, when, sources searched, coverage caveat), the art. 15
    information and every item found."""
    if lang not in LANGS:
        raise ValueError(f"unknown language {lang!r}; known: {', '.join(LANGS)}")
    if notice.lang != lang:
        raise ValueError(f"the notice is in {notice.lang!r}, the export in {lang!r}")
    doc = {
        "kind": "agent-memory access export (GDPR art. 15)",
        "cover": {
            "customer_id": report.customer_id,
            "namespace_prefix": report.namespace_prefix,
            "requested_by": requested_by,
            "generated_at": report.generated_at,
            "lang": lang,
            "sources_searched": report.sources,
            "counts": report.counts,
            "nothing_found": report.empty,
            # why a preference's created/updated may differ from its conversation's date (the demo's replayed days)
            "clock_note": STRINGS[lang]["replayed_clock"] if report.replayed_clock else None,
            "storage_formats": report.formats,
            "coverage": {
                "unattributed_threads": report.unattributed_threads,
                "caveat": STRINGS[lang]["caveat"].format(n=report.unattributed_threads),
                "possible_threads_not_included": report.residue,
                "possible_threads_note": STRINGS[lang]["residue"].format(
                    n=len({r["thread_id"] for r in report.residue})
                ),
            },
        },
        "information": {
            **notice.texts,
            "timezone": str(notice.timezone),
            "retention": [{"data": kind, "period": period} for kind, period in notice.retention],
        },
        "store_documents": report.documents,
        "memory_history": report.memory_history,
        "threads": report.threads,
        "logs": report.logs,
        "erasure_register": {"requests": report.erasures, "rechecks": report.erasure_rechecks},
        "access_register": report.access_exports,
    }
    return json.loads(json.dumps(doc, default=_json_default))


def export_json(report: AccessReport, *, requested_by: str, lang: str = "es", notice: Notice) -> bytes:
    return json.dumps(
        export_document(report, requested_by=requested_by, lang=lang, notice=notice), ensure_ascii=False, indent=2
    ).encode("utf-8")


STRINGS = {
    "es": {
        "title": "Sus datos en nuestros asistentes de atención (cliente {id})",
        "intro": (
            "Respuesta a su solicitud de acceso (artículo 15 del RGPD): qué datos suyos guardan nuestros "
            "asistentes conversacionales y nuestros registros, para qué, durante cuánto tiempo y qué derechos tiene."
        ),
        "request": "Su solicitud",
        "requested_by": "Solicitado por",
        "requester": "el cliente {id} (derecho de acceso)",
        "prepared_by": "Preparado por",
        "prepared": "{who}, en nombre de {controller}",
        "dpo_office": "el delegado de protección de datos",
        "generated_at": "Fecha",
        "controller": "Responsable del tratamiento",
        "contact": "Contacto",
        "dpo": "Delegado de protección de datos",
        "purposes": "Para qué tratamos sus datos",
        "recipients": "Destinatarios",
        "transfers": "Transferencias internacionales",
        "automated": "Decisiones automatizadas",
        "retention": "Cuánto tiempo los conservamos",
        "kind_of_data": "Datos",
        "period": "Plazo",
        "source": "De dónde proceden",
        "rights": "Sus derechos",
        "complaint": "Reclamación",
        "summary": "Resumen",
        "what": "Qué",
        "how_many": "Cuántos",
        "caveat": "{n} hilos de conversación de la base de datos no pueden atribuirse a ningún sujeto con las fuentes "
        "consultadas; si alguno fuera de este cliente, no está en esta exportación.",
        "nothing": "No hay ningún dato sobre este cliente en las fuentes consultadas.",
        "residue": (
            "{n} hilos sin atribuir contienen el id del cliente o valores propios de sus documentos; no se incluyen "
            "hasta que el DPO decida (se listan con el término encontrado)."
        ),
        "documents": "Sus preferencias guardadas (memoria de los asistentes)",
        "history": "Lo que guardamos y cómo cambió",
        "history_current": "valor actual",
        "history_gone": "ya no está en la memoria",
        "history_expired": "caducado: el asistente ya no lo usa (se borrará en el próximo barrido)",
        "history_held": "el asistente lo usa",
        "history_none": "No consta ninguna escritura de sus preferencias.",
        "history_store": (
            "valor que guarda la memoria, con la fecha de su última escritura (no consta en qué conversación)"
        ),
        "history_superseded": "sustituido",
        "history_thread_gone": "en una conversación que ya no guardamos",
        "history_value_unknown": "valor que no consta",
        "threads": "Sus conversaciones",
        "logs": "Nuestros registros sobre usted",
        "erasures": "Sus solicitudes de borrado",
        "rechecks": "Comprobaciones posteriores de esos borrados",
        "exports": "Sus solicitudes de acceso anteriores",
        "annex": "Anexo técnico (para el delegado de protección de datos)",
        "sources": "Fuentes consultadas",
        "formats": "Formatos de almacenamiento de sus conversaciones",
        "coverage": "Cobertura",
        "expired": "caducado (se borrará en el próximo barrido)",
        "thread": "Conversación {n}",
        "found_by": "encontrada por",
        "refused": "contenido que el sistema rechaza al guardar ({types}); no se muestra",
        "undecodable": "contenido ilegible ({reason})",
        "none_documents": "No guardamos ninguna preferencia suya.",
        "none_threads": "No hay conversaciones suyas.",
        "none_logs": "Ninguno de nuestros registros contiene datos suyos.",
        "none_erasures": "No ha pedido ningún borrado.",
        "none_exports": "Esta es su primera solicitud de acceso.",
        "created": "creado",
        "updated": "actualizado",
        "expires": "caduca",
        "never": "no caduca",
        "from_to": "del {first} al {last}",
        "you": "Usted",
        "assistant": "Asistente",
        "system": "Sistema",
        "calls": "El asistente {did}",
        "result_of": "Resultado: el asistente {did}",
        "no_result": "(sin contenido)",
        "clock": "Todas las horas de este documento están en la zona horaria {tz}.",
        "replayed_clock": (
            "Las fechas «creado» y «actualizado» de cada preferencia son las del reloj de la base de datos al "
            "guardarla. Este sistema es una demostración que reproduce días pasados: sus conversaciones y nuestros "
            "registros llevan la fecha del día reproducido, así que una preferencia guardada en una conversación "
            "puede figurar aquí con una fecha distinta de la de esa conversación. Es la misma preferencia."
        ),
        "preference": "Preferencia de {tipo}",
        "access_request": "su solicitud de acceso",
        "export_n": "la exportación n.º {n} de sus datos",
        "your_memory": "sus preferencias guardadas",
        "yes": "sí",
        "no": "no",
    },
    "en": {
        "title": "Your data in our customer-service assistants (customer {id})",
        "intro": (
            "Answer to your access request (GDPR article 15): what data about you our conversational "
            "assistants and our logs hold, what for, for how long, and your rights."
        ),
        "request": "Your request",
        "requested_by": "Requested by",
        "requester": "customer {id} (right of access)",
        "prepared_by": "Prepared by",
        "prepared": "{who}, on behalf of {controller}",
        "dpo_office": "the data protection officer",
        "generated_at": "Date",
        "controller": "Controller",
        "contact": "Contact",
        "dpo": "Data protection officer",
        "purposes": "What we process your data for",
        "recipients": "Recipients",
        "transfers": "International transfers",
        "automated": "Automated decisions",
        "retention": "How long we keep it",
        "kind_of_data": "Data",
        "period": "Period",
        "source": "Where it comes from",
        "rights": "Your rights",
        "complaint": "Complaint",
        "summary": "Summary",
        "what": "What",
        "how_many": "How many",
        "caveat": "{n} conversation threads in the database cannot be attributed to any subject by the sources "
        "searched; if any of them is this customer's, it is not in this export.",
        "nothing": "There is no data about this customer in the sources searched.",
        "residue": "{n} unattributed threads hold the customer's id or values of their own documents; they are not "
        "included until the DPO decides (listed with the term found).",
        "documents": "Your saved preferences (the assistants' memory)",
        "history": "What we hold and how it changed",
        "history_current": "current value",
        "history_gone": "no longer in the memory",
        "history_expired": "expired: the assistant no longer uses it (deleted by the next sweep)",
        "history_held": "the assistant uses it",
        "history_none": "No write of your preferences is recorded.",
        "history_store": "the value the memory holds, dated by its last write (in which conversation is not known)",
        "history_superseded": "superseded",
        "history_thread_gone": "in a conversation we no longer keep",
        "history_value_unknown": "value not known",
        "threads": "Your conversations",
        "logs": "Our logs about you",
        "erasures": "Your erasure requests",
        "rechecks": "Later checks of those erasures",
        "exports": "Your earlier access requests",
        "annex": "Technical annex (for the data protection officer)",
        "sources": "Sources searched",
        "formats": "Storage formats of your conversations",
        "coverage": "Coverage",
        "expired": "expired (deleted by the next sweep)",
        "thread": "Conversation {n}",
        "found_by": "found by",
        "refused": "content the system refuses to save ({types}); not shown",
        "undecodable": "unreadable content ({reason})",
        "none_documents": "We keep no preference of yours.",
        "none_threads": "There are no conversations of yours.",
        "none_logs": "None of our logs holds data about you.",
        "none_erasures": "You have not asked for any erasure.",
        "none_exports": "This is your first access request.",
        "created": "created",
        "updated": "updated",
        "expires": "expires",
        "never": "does not expire",
        "from_to": "from {first} to {last}",
        "you": "You",
        "assistant": "Assistant",
        "system": "System",
        "calls": "The assistant {did}",
        "result_of": "Result: the assistant {did}",
        "no_result": "(no content)",
        "clock": "Every time in this document is in the {tz} time zone.",
        "replayed_clock": (
            'The "created" and "updated" dates of each preference are the database\'s clock when it was saved. '
            "This system is a demonstration that replays past days: your conversations and our logs carry the "
            "replayed day's date, so a preference saved in a conversation may show here a date different from that "
            "conversation's. It is the same preference."
        ),
        "preference": "{tipo} preference",
        "access_request": "your access request",
        "export_n": "export no. {n} of your data",
        "your_memory": "your saved preferences",
        "yes": "yes",
        "no": "no",
    },
}

# What each count, log, register and column is called in the export (keys as the report and SQL name them).
LABELS = {
    "es": {
        "documents": "Preferencias guardadas",
        "expired_documents": "Preferencias caducadas (pendientes de barrido)",
        "threads": "Conversaciones",
        "messages": "Mensajes",
        "marked_payloads": "Contenidos que no se pueden mostrar",
        "memory_writes": "Escrituras en la memoria",
        "conversations": "Registro de conversaciones",
        "guard_denials": "Acciones denegadas por el control de seguridad",
        "episode_denials": "Acciones denegadas durante una avería",
        "serde_refusals": "Contenidos rechazados al guardar",
        "dead_letters": "Operaciones de una conversación que no se pudieron guardar tras una avería",
        "agent_server_runs": "Lo que envió a través del servidor de agentes",
        "said": "Lo que escribió",
        "created_at": "Fecha",
        "put": "guardar un paso de la conversación",
        "put_writes": "guardar lo escrito en un paso",
        "delete_thread": "borrar la conversación",
        "erasure_requests": "Solicitudes de borrado",
        "erasure_rechecks": "Comprobaciones de borrados",
        "access_exports": "Solicitudes de acceso anteriores",
        "store": "Memoria (documentos)",
        "logs": "Nuestros registros",
        "registers": "Registros de protección de datos",
        "threads_not_searched": "Fuentes de conversaciones que no se pudieron consultar",
        "written_at": "Escrito",
        "key": "Clave",
        "thread_id": "Conversación",
        "agent": "Asistente",
        "started_at": "Empezó",
        "last_turn_at": "Último mensaje",
        "turns": "Turnos",
        "denied_at": "Fecha",
        "tool": "Herramienta",
        "risk": "Riesgo",
        "reason": "Motivo",
        "degraded_from": "Avería desde",
        "degraded_to": "Avería hasta",
        "thread": "Conversación",
        "denial": "Acción denegada",
        "refused_at": "Fecha",
        "type_name": "Tipo de contenido",
        "kind": "Clase",
        "requested_at": "Pedido",
        "finished_at": "Terminado",
        "status": "Estado",
        "operator": "Atendido por",
        "deleted": "Borrado",
        "checked_at": "Comprobado",
        "trigger": "Motivo",
        "clean": "Sin datos",
        "counts": "Encontrado",
        "exported_at": "Fecha",
        "format": "Formato",
        "lang": "Idioma",
        "size_bytes": "Tamaño (bytes)",
        "sha256": "Huella sha256",
        "term": "Término",
        "customer_id": "Cliente",
        "complete": "completo",
        "failed": "fallido",
        "interrupted": "interrumpido",
        "running": "en curso",
        "manual": "a mano",
        "sweep": "barrido periódico",
        "sweep_manual": "barrido a mano",
        "sweep_demo": "barrido de la demo",
        "sweep_scheduled_dry_run": "simulación de barrido periódico",
        "sweep_manual_dry_run": "simulación de barrido a mano",
        "sweep_demo_dry_run": "simulación de barrido de la demo",
        "HIGH": "alto",
        "MEDIUM": "medio",
        "LOW": "bajo",
        "checkpoints": "estados de conversación",
        "checkpoint_blobs": "contenidos de conversación",
        "checkpoint_writes": "escrituras de conversación",
        "store_vectors": "índice de búsqueda",
        "core_memory_writes": "escrituras en la memoria",
        "core_conversations": "registro de conversaciones",
        "core_guard_denials": "acciones denegadas",
        "core_serde_refusals": "contenidos rechazados",
        "core_checkpoint_dead_letters": "operaciones no guardadas tras una avería",
        "data_views": "Consultas de sus datos por nuestro personal",
        "viewed_at": "Fecha",
        "viewer": "Quién",
        "role": "Función",
        "target": "Qué",
        "purpose": "Finalidad",
        "namespace": "su memoria",
        "search": "una búsqueda por significado",
        "refused": "un intento de ver su memoria desde otra tienda, denegado",
        "access_preview": "la vista previa de una solicitud de acceso",
        "access_export": "una exportación de sus datos",
        "manager": "responsable de tienda",
        "sre": "operaciones (SRE)",
        "dpo": "delegado de protección de datos",
        "migration_version": "Versión del formato de LangGraph",
        "shallow": "Solo el último estado",
        "rows": "Filas",
        "encrypted": "Filas cifradas",
        "encrypted_threads": "Conversaciones cifradas",
        "encrypted_writes_read": "Escrituras cifradas leídas con la clave",
        "delta_snapshots": "Instantáneas de canales delta",
        "delta_checkpoints": "Estados con canales delta",
        "delta_threads": "Conversaciones con canales delta",
        "pickle": "Filas pickle (nunca se leen)",
        "pickle_threads": "Conversaciones con filas pickle",
        "json": "Filas JSON",
        "undecodable": "Filas ilegibles",
        "older_checkpoints": "Estados en un formato anterior",
        "pending_sends": "Envíos pendientes (formato anterior)",
        "decoded": "Todo leído",
        "local_viewer": "personal de la empresa (modo local, sin identificar)",
        # the guard's reason for a denial (agent_memory_runtime/guard.py), and the short form older rows hold
        "checkpoint persistence degraded (PostgreSQL unreachable)": (
            "no se podía guardar la conversación (base de datos no disponible)"
        ),
        "degraded": "no se podía guardar la conversación (base de datos no disponible)",
        # a preference document's fields and its kinds (`tipo`), as the agents write them
        "tipo": "Tipo",
        "texto": "Texto",
        "valor": "Valor",
        "hilo": "Conversación",
        "recogida": "recogida",
        "contacto": "contacto",
        "idioma": "idioma",
        "horario": "horario",
    },
    "en": {
        "documents": "Saved preferences",
        "expired_documents": "Expired preferences (not yet swept)",
        "threads": "Conversations",
        "messages": "Messages",
        "marked_payloads": "Contents that cannot be shown",
        "memory_writes": "Writes to the memory",
        "conversations": "Conversation log",
        "guard_denials": "Actions refused by the safety check",
        "episode_denials": "Actions refused during an outage",
        "serde_refusals": "Contents refused when saved",
        "dead_letters": "Operations on a conversation that could not be saved after an outage",
        "agent_server_runs": "What you sent through the agent server",
        "said": "What you wrote",
        "created_at": "Date",
        "put": "save a step of the conversation",
        "put_writes": "save what a step wrote",
        "delete_thread": "delete the conversation",
        "erasure_requests": "Erasure requests",
        "erasure_rechecks": "Erasure checks",
        "access_exports": "Earlier access requests",
        "store": "Memory (documents)",
        "logs": "Our logs",
        "registers": "Data-protection registers",
        "threads_not_searched": "Conversation sources that could not be searched",
        "written_at": "Written",
        "key": "Key",
        "thread_id": "Conversation",
        "agent": "Assistant",
        "started_at": "Started",
        "last_turn_at": "Last message",
        "turns": "Turns",
        "denied_at": "Date",
        "tool": "Tool",
        "risk": "Risk",
        "reason": "Reason",
        "degraded_from": "Outage from",
        "degraded_to": "Outage to",
        "thread": "Conversation",
        "denial": "Refused action",
        "refused_at": "Date",
        "type_name": "Content type",
        "kind": "Kind",
        "requested_at": "Requested",
        "finished_at": "Finished",
        "status": "Status",
        "operator": "Handled by",
        "deleted": "Deleted",
        "checked_at": "Checked",
        "trigger": "Why",
        "clean": "No data",
        "counts": "Found",
        "exported_at": "Date",
        "format": "Format",
        "lang": "Language",
        "size_bytes": "Size (bytes)",
        "sha256": "sha256 fingerprint",
        "term": "Term",
        "customer_id": "Customer",
        "complete": "complete",
        "failed": "failed",
        "interrupted": "interrupted",
        "running": "running",
        "manual": "by hand",
        "sweep": "periodic sweep",
        "sweep_manual": "manual sweep",
        "sweep_demo": "demo sweep",
        "sweep_scheduled_dry_run": "periodic sweep dry run",
        "sweep_manual_dry_run": "manual sweep dry run",
        "sweep_demo_dry_run": "demo sweep dry run",
        "HIGH": "high",
        "MEDIUM": "medium",
        "LOW": "low",
        "checkpoints": "conversation states",
        "checkpoint_blobs": "conversation contents",
        "checkpoint_writes": "conversation writes",
        "store_vectors": "search index",
        "core_memory_writes": "writes to the memory",
        "core_conversations": "conversation log",
        "core_guard_denials": "refused actions",
        "core_serde_refusals": "refused contents",
        "core_checkpoint_dead_letters": "operations not saved after an outage",
        "data_views": "Views of your data by our staff",
        "viewed_at": "Date",
        "viewer": "Who",
        "role": "Role",
        "target": "What",
        "purpose": "Purpose",
        "namespace": "your memory",
        "search": "a search by meaning",
        "refused": "an attempt to see your memory from another store, refused",
        "access_preview": "the preview of an access request",
        "access_export": "an export of your data",
        "manager": "store manager",
        "sre": "operations (SRE)",
        "dpo": "data protection officer",
        "migration_version": "LangGraph format version",
        "shallow": "Latest state only",
        "rows": "Rows",
        "encrypted": "Encrypted rows",
        "encrypted_threads": "Encrypted conversations",
        "encrypted_writes_read": "Encrypted writes read with the key",
        "delta_snapshots": "Delta channel snapshots",
        "delta_checkpoints": "States with delta channels",
        "delta_threads": "Conversations with delta channels",
        "pickle": "Pickle rows (never read)",
        "pickle_threads": "Conversations with pickle rows",
        "json": "JSON rows",
        "undecodable": "Unreadable rows",
        "older_checkpoints": "States in an older format",
        "pending_sends": "Pending sends (older format)",
        "decoded": "Everything read",
        "local_viewer": "company staff (local mode, not identified)",
        "checkpoint persistence degraded (PostgreSQL unreachable)": (
            "the conversation could not be saved (database unavailable)"
        ),
        "degraded": "the conversation could not be saved (database unavailable)",
        "tipo": "Kind",
        "texto": "Text",
        "valor": "Value",
        "hilo": "Conversation",
        "recogida": "pickup",
        "contacto": "contact",
        "idioma": "language",
        "horario": "schedule",
    },
}

# What each of the agents' tools did, in the customer's words (the export's HTML; the JSON keeps the tool's name):
# "the assistant saved your preference", never `recordar_preferencia`. A tool not listed: an internal function.
TOOL_WORDS = {
    "es": {
        "recordar_preferencia": "guardó su preferencia",
        "preferencias": "consultó sus preferencias guardadas",
        "avisos_proveedor": "consultó los avisos de los proveedores",
        "proponer_entrega": "le propuso cómo recibir su pedido",
        "": "usó una función interna",
    },
    "en": {
        "recordar_preferencia": "saved your preference",
        "preferencias": "looked up your saved preferences",
        "avisos_proveedor": "looked up the suppliers' notices",
        "proponer_entrega": "proposed how to receive your order",
        "": "used an internal function",
    },
}

# The columns a person reads, per log and register (the JSON export keeps every column).
COLUMNS = {
    "memory_writes": ("written_at", "key", "thread_id", "agent"),
    "conversations": ("thread", "agent", "turns"),  # dated once, in the conversation's heading (one clock)
    "guard_denials": ("denied_at", "tool", "risk", "reason", "thread_id"),
    "episode_denials": ("degraded_from", "degraded_to", "denial"),
    "serde_refusals": ("refused_at", "type_name", "kind", "thread_id"),
    "dead_letters": ("created_at", "kind", "thread", "size_bytes"),  # the technical error stays in the JSON
    "agent_server_runs": ("created_at", "thread", "said"),  # the run's status, input and output stay in the JSON
    "erasures": ("requested_at", "finished_at", "status", "operator", "deleted"),
    "rechecks": ("checked_at", "trigger", "clean", "counts"),
    "exports": ("exported_at", "operator", "format", "lang", "size_bytes", "sha256"),
    "residue": ("thread_id", "term", "kind"),
    "data_views": ("viewed_at", "viewer", "role", "kind", "target", "purpose"),
}

HTML_STYLE = """
body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;color:#111;line-height:1.4}
h1{font-size:1.5rem} h2{font-size:1.2rem;border-bottom:1px solid #ccc;margin-top:2rem} h3{font-size:1rem}
table{border-collapse:collapse;width:100%;font-size:.85rem}
td,th{border:1px solid #ccc;padding:.25rem;vertical-align:top;text-align:left}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.1rem 1rem;margin:.3rem 0} dt{font-weight:bold} dd{margin:0}
.marker{color:#a00;font-weight:bold} .muted{color:#555;font-size:.85rem}
.msg{margin:.3rem 0;padding:.3rem .5rem;border-left:3px solid #999;white-space:pre-wrap} .human{border-color:#1f77b4}
.ai{border-color:#2ca02c} .tool{border-color:#ff7f0e} .cover{background:#f5f5f5;padding:1rem}
@media print{body{margin:0} h2{page-break-after:avoid} .msg{page-break-inside:avoid}}
"""


class _Writer:
    """Formats values for one export: dates in the notice's time zone and the requester's language, no raw keys
    (a conversation is named by its number in the export, `conversations`: thread id -> number)."""

    def __init__(self, lang: str, zone: tzinfo, labels: dict[str, str], conversations: dict[str, int]) -> None:
        self.lang, self.zone, self.labels, self.conversations = lang, zone, labels, conversations

    def conversation(self, thread_id: Any) -> str:
        n = self.conversations.get(thread_id) if isinstance(thread_id, str) else None
        return STRINGS[self.lang]["thread"].format(n=n) if n else self.text(thread_id)

    def document(self, key: str) -> str:
        """A store document's key in words (HTML): `pref-<tipo>` as the preference it holds, any other key as the
        agent wrote it, in code."""
        tipo = key.removeprefix("pref-")
        if key.startswith("pref-") and tipo in self.labels:
            return _e(STRINGS[self.lang]["preference"].format(tipo=self.label(tipo)))
        return f"<code>{_e(key)}</code>"

    def target(self, row: dict) -> str:
        """What a member of staff looked at (core_data_views' `target`, an internal key) in words."""
        kind, target, s = row.get("kind"), str(row.get("target") or ""), STRINGS[self.lang]
        if kind == "thread":
            return self.conversation(target)
        if kind in ("namespace", "search"):
            return s["your_memory"]
        if kind == "access_preview":
            return s["access_request"]
        if kind == "access_export" and target.startswith("access_register:"):
            return s["export_n"].format(n=target.removeprefix("access_register:"))
        return self.text(target)

    def label(self, key: str) -> str:
        return self.labels.get(key, key)

    def moment(self, value: Any) -> str:
        when = _as_datetime(value)
        if when is None:
            return self.text(value)
        return format_datetime(when, "d MMM y, HH:mm", tzinfo=self.zone, locale=self.lang)

    def number(self, value: float) -> str:
        return format_decimal(value, locale=self.lang)

    def written(self, value: Any) -> str:
        """A value the agents wrote (a tool call's argument, a document's field) as they wrote it: text never
        translated (`tipo = contacto` in every language), numbers, dates and empties as `text` writes them."""
        if isinstance(value, str):
            return value or "—"
        if isinstance(value, dict):
            shown = {k: v for k, v in value.items() if v not in (None, "", 0, [], {})}
            return "; ".join(f"{k}: {self.written(v)}" for k, v in shown.items()) or "—"
        if isinstance(value, list):
            return ", ".join(self.written(v) for v in value) or "—"
        return self.text(value)

    def text(self, value: Any) -> str:
        """Any value as words: booleans, numbers, dates, and dicts/lists as "label: value" lines."""
        if value is None or value == "":
            return "—"
        if isinstance(value, bool):
            return STRINGS[self.lang]["yes" if value else "no"]
        if isinstance(value, (int, float)):
            return self.number(value)
        if isinstance(value, datetime):
            return self.moment(value)
        if isinstance(value, dict):
            shown = {k: v for k, v in value.items() if v not in (None, "", 0, [], {})}
            return "; ".join(f"{self.label(k)}: {self.text(v)}" for k, v in shown.items()) or "—"
        if isinstance(value, list):
            return ", ".join(self.text(v) for v in value) or "—"
        return self.label(str(value)) if str(value) in self.labels else str(value)

    def cell(self, column: str, value: Any, row: dict | None = None) -> str:
        if column == "target" and row is not None:
            return self.target(row)
        if column in ("thread_id", "thread"):
            return self.conversation(value)
        if column == "key" and isinstance(value, str):
            tipo = value.removeprefix("pref-")
            if value.startswith("pref-") and tipo in self.labels:
                return STRINGS[self.lang]["preference"].format(tipo=self.label(tipo))
        if column.endswith("_at") or column in ("degraded_from", "degraded_to"):
            return self.moment(value) if value else "—"
        if column == "operator" and value in LOCAL_OPERATORS:
            return STRINGS[self.lang]["dpo_office"]
        if column == "viewer" and value in LOCAL_OPERATORS:  # the dashboard in local mode: nobody signed in
            return self.label("local_viewer")
        if column == "denial" and isinstance(value, dict):
            shown = {k: value.get(k) for k in ("tool", "risk", "reason")}
            return "; ".join(x for x in (self.text(shown), self.conversation(value.get("thread_id"))) if x != "—")
        return self.text(value)


def _as_datetime(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str):
        try:
            return _as_datetime(datetime.fromisoformat(value))
        except ValueError:
            return None
    return None


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _table(rows: list[dict], columns: tuple[str, ...], w: _Writer) -> str:
    head = "".join(f"<th>{_e(w.label(c))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_e(w.cell(c, r.get(c), r))}</td>" for c in columns) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _list(items: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{_e(i)}</li>" for i in items) + "</ul>"


def _content(content: Any) -> str:
    """A message's text: a string, or the text blocks of a list of content blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            b if isinstance(b, str) else str(b.get("text", ""))
            for b in content
            if isinstance(b, str) or isinstance(b, dict) and b.get("type") == "text"
        )
    return "" if content is None else json.dumps(content, ensure_ascii=False)


def _did(tool: Any, lang: str) -> str:
    """What a tool did, in the customer's words (TOOL_WORDS)."""
    words = TOOL_WORDS[lang]
    return words.get(tool if isinstance(tool, str) else "", words[""])


def _tool_call(call: dict, s: dict, w: _Writer) -> str:
    """A tool call in the customer's words, its arguments as the agent wrote them (in any language), in code."""
    shown = args_in_words(call, w.written)
    said = _e(s["calls"].format(did=_did(call.get("name"), w.lang)))
    return said + (f": <code>{_e(shown)}</code>" if shown else "")


def _message(m: dict, s: dict, w: _Writer) -> str:
    if m["kind"] == "refused":
        return f"<div class='msg marker'>{_e(s['refused'].format(types=m['refused_type']))}</div>"
    if m["kind"] == "undecodable":
        return f"<div class='msg marker'>{_e(s['undecodable'].format(reason=m['reason']))}</div>"
    who = {"human": s["you"], "ai": s["assistant"], "system": s["system"]}.get(
        m["kind"], s["result_of"].format(did=_did(m.get("tool_name"), w.lang)) if m["kind"] == "tool" else m["kind"]
    )
    parts = [f"<b>{_e(who)}</b> <span class='muted'>{_e(w.moment(m['ts']))}</span>"]
    text = _content(m.get("content"))
    if text:  # what was said, as it was said (class `said`: the customer's or the assistant's words, any language)
        parts.append(f"<div class='said'>{_e(text)}</div>")
    elif m["kind"] == "tool":  # a tool that returned nothing: said, never an empty box
        parts.append(f"<div class='muted'>{_e(s['no_result'])}</div>")
    for call in m.get("tool_calls") or []:
        parts.append(f"<div class='muted'>{_tool_call(call, s, w)}</div>")
    if m.get("refused_type"):
        parts.append(f"<p class='marker'>{_e(s['refused'].format(types=m['refused_type']))}</p>")
    return f"<div class='msg {_e(m['kind'])}'>" + "".join(parts) + "</div>"


def _history_write(row: dict, s: dict, w: _Writer) -> str:
    """One write of a document in the customer's words: its value (struck through once superseded), when, in which
    conversation (its number in this export), never a tool's name or a thread id."""
    value = _e(w.written(row["value"])) if row["value"] is not None else _e(s["history_value_unknown"])
    shown = f"<del>{value}</del>" if row["superseded"] else f"<strong>{value}</strong>"
    if row["source"] == "store":
        where = s["history_store"]
    elif row["thread_id"] in w.conversations:
        where = w.conversation(row["thread_id"])
    else:
        where = s["history_thread_gone"]
    state = s["history_current"] if row["current"] else s["history_superseded"] if row["superseded"] else ""
    parts = [_e(w.moment(row["written_at"])), _e(where)] + ([_e(state)] if state else [])
    return f"<dt>{' · '.join(parts)}</dt><dd class='value'>{shown}</dd>"


def _memory_history(rows: list[dict], prefix: str, s: dict, w: _Writer, purpose: str) -> list[str]:
    """The section "what we hold and how it changed": each document with every write, its state now."""
    out = [f"<h2>{s['history']}</h2><p>{_e(purpose)}</p>"]
    if not rows:
        return [*out, f"<p>{s['history_none']}</p>"]
    documents: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        documents.setdefault((row["prefix"], row["key"]), []).append(row)
    for (doc_prefix, key), writes in documents.items():
        place = doc_prefix[len(prefix) + 1 :].replace(".", " / ")
        state = s[f"history_{writes[-1]['state']}"]
        out.append(
            f"<h3>{f'<code>{_e(place)}</code> / ' if place else ''}{w.document(key)}</h3>"
            f"<p class='muted'>{_e(state)}</p><dl>" + "".join(_history_write(r, s, w) for r in writes) + "</dl>"
        )
    return out


def export_html(report: AccessReport, *, requested_by: str, lang: str = "es", notice: Notice) -> bytes:
    """A document to hand to the customer (prints to PDF from the browser): the art. 15 information, then the data,
    in `lang`, dates in the notice's time zone; the same data as the JSON, without internal keys."""
    doc = export_document(report, requested_by=requested_by, lang=lang, notice=notice)
    s, cover, info = STRINGS[lang], doc["cover"], notice.texts
    numbers = {thread["thread_id"]: n for n, thread in enumerate(doc["threads"], start=1)}
    w = _Writer(lang, notice.timezone, LABELS[lang], numbers)
    who = s["dpo_office"] if requested_by in LOCAL_OPERATORS else f"{s['dpo_office']} ({requested_by})"
    title = s["title"].format(id=report.customer_id)
    p = [
        f"<!DOCTYPE html><html lang='{lang}'><head><meta charset='utf-8'><title>{_e(title)}</title>"
        f"<style>{HTML_STYLE}</style></head><body><h1>{_e(title)}</h1><p>{_e(s['intro'])}</p>",
        f"<div class='cover'><h2>{s['request']}</h2><dl>"
        f"<dt>{s['requested_by']}</dt><dd>{_e(s['requester'].format(id=report.customer_id))}</dd>"
        f"<dt>{s['prepared_by']}</dt><dd>{_e(s['prepared'].format(who=who, controller=info['controller_name']))}</dd>"
        f"<dt>{s['generated_at']}</dt><dd>{_e(w.moment(report.generated_at))} ({_e(str(notice.timezone))})</dd>"
        f"<dt>{s['controller']}</dt><dd>{_e(info['controller_name'])}</dd>"
        f"<dt>{s['contact']}</dt><dd>{_e(info['controller_contact'])}</dd>"
        f"<dt>{s['dpo']}</dt><dd>{_e(info['dpo_contact'])}</dd></dl>"
        f"<p class='muted'>{_e(s['clock'].format(tz=notice.timezone))}</p>",
        f"<h3>{s['purposes']}</h3>{_list(info['purposes'])}<h3>{s['recipients']}</h3>{_list(info['recipients'])}",
        f"<h3>{s['transfers']}</h3><p>{_e(info['transfers'])}</p><h3>{s['automated']}</h3>"
        f"<p>{_e(info['automated_decisions'])}</p>",
        f"<h3>{s['retention']}</h3><table><tr><th>{s['kind_of_data']}</th><th>{s['period']}</th></tr>"
        + "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in notice.retention)
        + "</table>",
        f"<h3>{s['source']}</h3><p>{_e(info['source'])}</p>",
        f"<h3>{s['rights']}</h3><p>{_e(info['rights'])}</p><p>{_e(info['complaint'])}</p>",
        f"<h3>{s['summary']}</h3>",
        "<p class='marker'>" + _e(s["nothing"]) + "</p>"
        if cover["nothing_found"]
        else f"<table><tr><th>{s['what']}</th><th>{s['how_many']}</th></tr>"
        + "".join(
            f"<tr><td>{_e(w.label(k))}</td><td>{_e(w.number(v))}</td></tr>" for k, v in cover["counts"].items() if v
        )
        + "</table>",
        "</div>",
    ]
    p.append(f"<h2>{s['documents']} ({w.number(len(doc['store_documents']))})</h2>")
    if not doc["store_documents"]:
        p.append(f"<p>{s['none_documents']}</p>")
    elif cover["clock_note"]:  # two clocks: said in plain words where the dates are read
        p.append(f"<p class='muted clock-note'>{_e(cover['clock_note'])}</p>")
    for d in doc["store_documents"]:
        flag = f" <span class='marker'>{s['expired']}</span>" if d["expired"] else ""
        value = d["value"] if isinstance(d["value"], dict) else {"valor": d["value"]}
        place = d["prefix"][len(report.namespace_prefix) + 1 :].replace(".", " / ")  # a nested namespace's own part
        p.append(
            f"<h3>{f'<code>{_e(place)}</code> / ' if place else ''}{w.document(d['key'])}{flag}</h3><dl>"
            + "".join(
                f"<dt>{_e(w.label(k))}</dt>"
                f"<dd class='value'>{_e(w.conversation(v) if k == 'hilo' else w.written(v))}</dd>"
                for k, v in value.items()
            )
            + "</dl>"
            f"<p class='muted'>{s['created']} {_e(w.moment(d['created_at']))} · {s['updated']} "
            f"{_e(w.moment(d['updated_at']))} · "
            + (f"{s['expires']} {_e(w.moment(d['expires_at']))}" if d["expires_at"] else s["never"])
            + "</p>"
        )
    p.extend(_memory_history(doc["memory_history"], report.namespace_prefix, s, w, info["history_purpose"]))
    p.append(f"<h2>{s['threads']} ({w.number(len(doc['threads']))})</h2>")
    if not doc["threads"]:
        p.append(f"<p>{s['none_threads']}</p>")
    for thread in doc["threads"]:
        # dated by its checkpoints, the clock of its messages (a log's clock may differ: the demo replays its days);
        # named by its number and dates, never its thread id or its count of checkpoints (both stay in the JSON)
        first, last = w.moment(thread["first_ts"]), w.moment(thread["last_ts"])
        p.append(
            f"<h3 id='conversation-{numbers[thread['thread_id']]}'>"
            f"{_e(s['thread'].format(n=numbers[thread['thread_id']]))}</h3>"
            f"<p class='muted'>{_e(s['from_to'].format(first=first, last=last))}</p>"
        )
        p.extend(_message(m, s, w) for m in thread["messages"])
    p.append(f"<h2>{s['logs']}</h2>")
    logged = {name: rows for name, rows in doc["logs"].items() if rows}
    if not logged:
        p.append(f"<p>{s['none_logs']}</p>")
    for name, rows in logged.items():
        # named as the conversations above, which date them
        if name in ("conversations", "dead_letters", "agent_server_runs"):
            rows = [{**r, "thread": r["thread_id"]} for r in rows]
        p.append(f"<h3>{_e(w.label(name))} ({w.number(len(rows))})</h3>" + _table(rows, COLUMNS[name], w))
    erasures = doc["erasure_register"]
    p.append(f"<h2>{s['erasures']}</h2>")
    if erasures["requests"]:
        p.append(_table(erasures["requests"], COLUMNS["erasures"], w))
        if erasures["rechecks"]:
            p.append(f"<h3>{s['rechecks']}</h3>" + _table(erasures["rechecks"], COLUMNS["rechecks"], w))
    else:
        p.append(f"<p>{s['none_erasures']}</p>")
    p.append(
        f"<h2>{s['exports']}</h2>"
        + (
            _table(doc["access_register"], COLUMNS["exports"], w)
            if doc["access_register"]
            else f"<p>{s['none_exports']}</p>"
        )
    )
    # what was searched, as the DPO configures and queries it: identifiers in code, as written
    p.append(
        f"<h2>{s['annex']}</h2><h3>{s['sources']}</h3><ul>"
        + "".join(
            f"<li>{_e(w.label(k))}: " + ", ".join(f"<code>{_e(x)}</code>" for x in v) + "</li>"
            for k, v in cover["sources_searched"].items()
        )
        + "</ul>"
    )
    if cover["storage_formats"]:
        p.append(f"<h3>{s['formats']}</h3><p>{_e(w.text(cover['storage_formats']))}</p>")
    p.append(f"<h3>{s['coverage']}</h3><p>{_e(cover['coverage']['caveat'])}</p>")
    if cover["coverage"]["possible_threads_not_included"]:
        p.append(
            f"<p>{_e(cover['coverage']['possible_threads_note'])}</p>"
            + _table(cover["coverage"]["possible_threads_not_included"], COLUMNS["residue"], w)
        )
    p.append("</body></html>")
    return "".join(p).encode("utf-8")


def render(report: AccessReport, fmt: str, *, requested_by: str, lang: str = "es", notice: Notice) -> bytes:
    """The export file in `fmt` ('json' or 'html'); raises ValueError for another format or language."""
    if fmt == "json":
        return export_json(report, requested_by=requested_by, lang=lang, notice=notice)
    if fmt == "html":
        return export_html(report, requested_by=requested_by, lang=lang, notice=notice)
    raise ValueError(f"unknown export format {fmt!r}; known: {', '.join(FORMATS)}")
