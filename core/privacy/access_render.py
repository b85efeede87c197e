"""The access export as the file handed to the customer: JSON (`export_json`) or HTML that prints to PDF
(`export_html`), in Spanish or English, from a `core.privacy.access_report.AccessReport`."""
from __future__ import annotations

import html
import json
from datetime import datetime
from typing import Any

from core.privacy.access_report import AccessReport

FORMATS = ("json", "html")
LANGS = ("es", "en")

def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (bytes, memoryview)):
        raise TypeError("raw bytes never go into an access export")
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def export_document(report: AccessReport, *, requested_by: str, lang: str = "es") -> dict[str, Any]:
    """The export as a JSON-ready dict: a cover (who asked, when, sources searched, coverage caveat) and
    every item found."""
    if lang not in LANGS:
        raise ValueError(f"unknown language {lang!r}; known: {', '.join(LANGS)}")
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
            "storage_formats": report.formats,
            "coverage": {
                "unattributed_threads": report.unattributed_threads,
                "caveat": STRINGS[lang]["caveat"].format(n=report.unattributed_threads),
                "possible_threads_not_included": report.residue,
                "possible_threads_note": STRINGS[lang]["residue"].format(n=len({r["thread_id"] for r in report.residue})),
            },
        },
        "store_documents": report.documents,
        "threads": report.threads,
        "logs": report.logs,
        "erasure_register": {"requests": report.erasures, "rechecks": report.erasure_rechecks},
        "access_register": report.access_exports,
    }
    return json.loads(json.dumps(doc, default=_json_default))


def export_json(report: AccessReport, *, requested_by: str, lang: str = "es") -> bytes:
    return json.dumps(export_document(report, requested_by=requested_by, lang=lang), ensure_ascii=False,
                      indent=2).encode("utf-8")


STRINGS = {
    "es": {
        "title": "Datos que los agentes guardan sobre el cliente {id}",
        "cover": "Portada", "requested_by": "Solicitado por", "generated_at": "Generado el",
        "sources": "Fuentes consultadas", "counts": "Recuentos", "coverage": "Cobertura",
        "formats": "Formatos de almacenamiento de sus hilos",
        "caveat": "{n} hilos de conversación de la base de datos no pueden atribuirse a ningún sujeto con las fuentes "
                  "consultadas; si alguno fuera de este cliente, no está en esta exportación.",
        "nothing": "No hay ningún dato sobre este cliente en las fuentes consultadas.",
        "residue": "{n} hilos sin atribuir contienen el id del cliente o valores propios de sus documentos; no se incluyen "
                   "hasta que el DPO decida (se listan con el término encontrado).",
        "documents": "Documentos de memoria", "threads": "Conversaciones", "logs": "Nuestros registros",
        "erasures": "Registro de borrados", "exports": "Exportaciones anteriores",
        "expired": "caducado (pendiente de barrido)", "thread": "Hilo", "found_by": "encontrado por",
        "refused": "contenido que el serializador rechazaría ({types}); no se muestra",
        "undecodable": "contenido ilegible ({reason})", "none": "Ninguno.",
        "created": "creado", "updated": "actualizado", "expires": "caduca",
    },
    "en": {
        "title": "Data the agents hold about customer {id}",
        "cover": "Cover", "requested_by": "Requested by", "generated_at": "Generated at",
        "sources": "Sources searched", "counts": "Counts", "coverage": "Coverage",
        "formats": "Storage formats of their threads",
        "caveat": "{n} conversation threads in the database cannot be attributed to any subject by the sources "
                  "searched; if any of them is this customer's, it is not in this export.",
        "nothing": "There is no data about this customer in the sources searched.",
        "residue": "{n} unattributed threads hold the customer's id or values of their own documents; they are not "
                   "included until the DPO decides (listed with the term found).",
        "documents": "Memory documents", "threads": "Conversations", "logs": "Our logs",
        "erasures": "Erasure register", "exports": "Earlier exports",
        "expired": "expired (not yet swept)", "thread": "Thread", "found_by": "found by",
        "refused": "content the serializer would refuse ({types}); not shown",
        "undecodable": "unreadable content ({reason})", "none": "None.",
        "created": "created", "updated": "updated", "expires": "expires",
    },
}

HTML_STYLE = """
body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;color:#111;line-height:1.4}
h1{font-size:1.5rem} h2{font-size:1.2rem;border-bottom:1px solid #ccc;margin-top:2rem} h3{font-size:1rem}
table{border-collapse:collapse;width:100%;font-size:.85rem} td,th{border:1px solid #ccc;padding:.25rem;vertical-align:top}
pre{white-space:pre-wrap;word-break:break-word;margin:0;font-size:.8rem} .marker{color:#a00;font-weight:bold}
.msg{margin:.3rem 0;padding:.3rem .5rem;border-left:3px solid #999} .human{border-color:#1f77b4}
.ai{border-color:#2ca02c} .tool{border-color:#ff7f0e} .cover{background:#f5f5f5;padding:1rem}
@media print{body{margin:0} h2{page-break-after:avoid} .msg{page-break-inside:avoid}}
"""


def _e(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, default=_json_default)
    return html.escape(value)


def _table(rows: list[dict], s: dict) -> str:
    if not rows:
        return f"<p>{s['none']}</p>"
    columns = list(rows[0])
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td><pre>{_e(r.get(c))}</pre></td>" for c in columns) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def export_html(report: AccessReport, *, requested_by: str, lang: str = "es") -> bytes:
    """A readable document (prints to PDF from the browser) with the same content as the JSON."""
    doc = export_document(report, requested_by=requested_by, lang=lang)
    s, cover = STRINGS[lang], doc["cover"]
    parts = [f"<!DOCTYPE html><html lang='{lang}'><head><meta charset='utf-8'>"
             f"<title>{_e(s['title'].format(id=report.customer_id))}</title><style>{HTML_STYLE}</style></head><body>",
             f"<h1>{_e(s['title'].format(id=report.customer_id))}</h1>",
             f"<div class='cover'><h2>{s['cover']}</h2>",
             f"<p><b>{s['requested_by']}:</b> {_e(requested_by)}<br><b>{s['generated_at']}:</b> "
             f"{_e(cover['generated_at'])}</p>",
             f"<h3>{s['sources']}</h3><ul>"
             + "".join(f"<li>{_e(k)}: {_e(', '.join(v))}</li>" for k, v in cover["sources_searched"].items())
             + "</ul>",
             f"<h3>{s['counts']}</h3><ul>" + "".join(f"<li>{_e(k)}: {v}</li>" for k, v in cover["counts"].items())
             + "</ul>",
             f"<h3>{s['formats']}</h3><ul>" + "".join(f"<li>{_e(k)}: {_e(v)}</li>"
                                                     for k, v in (cover["storage_formats"] or {}).items()) + "</ul>",
             f"<h3>{s['coverage']}</h3><p>{_e(cover['coverage']['caveat'])}</p>"
             f"<p>{_e(cover['coverage']['possible_threads_note'])}</p>"
             + _table(cover["coverage"]["possible_threads_not_included"], s)]
    if cover["nothing_found"]:
        parts.append(f"<p class='marker'>{s['nothing']}</p>")
    parts.append("</div>")
    parts.append(f"<h2>{s['documents']} ({len(doc['store_documents'])})</h2>")
    for d in doc["store_documents"]:
        flag = f" <span class='marker'>{s['expired']}</span>" if d["expired"] else ""
        parts.append(f"<h3>{_e(d['prefix'])} / {_e(d['key'])}{flag}</h3><p>{s['created']} {_e(d['created_at'])} · "
                     f"{s['updated']} {_e(d['updated_at'])} · {s['expires']} {_e(d['expires_at']) or '—'}</p>"
                     f"<pre>{_e(d['value'])}</pre>")
    parts.append(f"<h2>{s['threads']} ({len(doc['threads'])})</h2>")
    for t in doc["threads"]:
        parts.append(f"<h3>{s['thread']} {_e(t['thread_id'])}</h3><p>{s['found_by']}: {_e(', '.join(t['sources']))}"
                     f" · {_e(t['first_ts'])} – {_e(t['last_ts'])}</p>")
        for m in t["messages"]:
            if m["kind"] == "refused":
                parts.append(f"<div class='msg marker'>{_e(s['refused'].format(types=m['refused_type']))}</div>")
            elif m["kind"] == "undecodable":
                parts.append(f"<div class='msg marker'>{_e(s['undecodable'].format(reason=m['reason']))}</div>")
            else:
                text = m["content"] if isinstance(m["content"], str) else json.dumps(m["content"], ensure_ascii=False)
                extra = ""
                if m.get("tool_calls"):
                    extra += "<pre>" + _e(m["tool_calls"]) + "</pre>"
                if m.get("refused_type"):
                    extra += f"<p class='marker'>{_e(s['refused'].format(types=m['refused_type']))}</p>"
                label = m["kind"] + (f" · {m['tool_name']}" if m.get("tool_name") else "")
                parts.append(f"<div class='msg {_e(m['kind'])}'><b>{_e(label)}</b> <small>{_e(m['ts'])}</small>"
                             f"<pre>{_e(text)}</pre>{extra}</div>")
    parts.append(f"<h2>{s['logs']}</h2>")
    for name, rows in doc["logs"].items():
        parts.append(f"<h3>{_e(name)} ({len(rows)})</h3>" + _table(rows, s))
    parts.append(f"<h2>{s['erasures']}</h2>" + _table(doc["erasure_register"]["requests"], s)
                 + _table(doc["erasure_register"]["rechecks"], s))
    parts.append(f"<h2>{s['exports']}</h2>" + _table(doc["access_register"], s))
    parts.append("</body></html>")
    return "".join(parts).encode("utf-8")


def render(report: AccessReport, fmt: str, *, requested_by: str, lang: str = "es") -> bytes:
    """The export file in `fmt` ('json' or 'html'); raises ValueError for another format or language."""
    if fmt == "json":
        return export_json(report, requested_by=requested_by, lang=lang)
    if fmt == "html":
        return export_html(report, requested_by=requested_by, lang=lang)
    raise ValueError(f"unknown export format {fmt!r}; known: {', '.join(FORMATS)}")
