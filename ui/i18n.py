"""UI strings: Spanish by default, English on request. Keys are English."""
from __future__ import annotations

import streamlit as st

LANGUAGES = {"es": "Español", "en": "English"}

STRINGS: dict[str, dict[str, str]] = {
    "app_title": {"es": "Memoria de los agentes", "en": "Agent memory"},
    "section_store": {"es": "Tienda", "en": "Store"},
    "section_ops": {"es": "Operaciones", "en": "Operations"},
    "section_dp": {"es": "Protección de datos", "en": "Data protection"},
    "page_memory": {"es": "Memoria", "en": "Memory"},
    "page_preferences": {"es": "Preferencias", "en": "Preferences"},
    "language": {"es": "Idioma", "en": "Language"},
    "db": {"es": "Base de datos", "en": "Database"},
    "db_ok": {"es": "accesible ({ms:.0f} ms, PostgreSQL {version})", "en": "reachable ({ms:.0f} ms, PostgreSQL {version})"},
    "db_down": {"es": "NO accesible: {error}", "en": "NOT reachable: {error}"},
    "db_checked": {"es": "comprobado a las {at}", "en": "checked at {at}"},
    "embedded": {"es": "PostgreSQL embebido (datos de demostración)", "en": "embedded PostgreSQL (demo data)"},
    "startup_failed": {"es": "No se puede abrir la base de datos de los agentes", "en": "The agents' database cannot be opened"},
    "startup_hint": {
        "es": "Destino: `{target}`. Compruebe `PG_AGENTES` y que el servidor acepte conexiones; el panel no muestra nada hasta entonces.",
        "en": "Target: `{target}`. Check `PG_AGENTES` and that the server accepts connections; the dashboard shows nothing until then.",
    },
    "retry": {"es": "Reintentar", "en": "Retry"},
    "read_failed": {"es": "La lectura ha fallado: {error}", "en": "The read failed: {error}"},
    "local_mode": {
        "es": "Modo local: sin proveedor de identidad, solo en 127.0.0.1. Roles concedidos: {roles}.",
        "en": "Local mode: no identity provider, 127.0.0.1 only. Roles granted: {roles}.",
    },
    "role_manager": {"es": "responsable de tienda (manager)", "en": "store manager (manager)"},
    "role_sre": {"es": "operaciones (sre)", "en": "operations (sre)"},
    "role_dpo": {"es": "protección de datos (dpo)", "en": "data protection (dpo)"},
    "seed_title": {"es": "Datos de demostración", "en": "Demo data"},
    "seed_waiting": {"es": "Otro proceso está sembrando los datos; esperando a que termine…",
                     "en": "Another process is seeding the data; waiting for it to finish…"},
    "seed_seeding": {"es": "Sembrando: {step} ({done}/{total})", "en": "Seeding: {step} ({done}/{total})"},
    "seed_step_only": {"es": "Sembrando: {step}", "en": "Seeding: {step}"},
    "seed_partial": {"es": "Las páginas muestran lo que ya existe y se actualizan al terminar.",
                     "en": "The pages show what already exists and refresh when it ends."},
    "seed_done": {"es": "Sembrados en {s:.0f} s: {turns} turnos, {conversations} conversaciones.",
                  "en": "Seeded in {s:.0f} s: {turns} turns, {conversations} conversations."},
    "seed_failed": {"es": "La siembra ha fallado: {error}", "en": "The seed failed: {error}"},
    "seed_step_suppliers": {"es": "avisos de proveedores", "en": "supplier notices"},
    "seed_step_employees": {"es": "ajustes del personal", "en": "staff settings"},
    "seed_step_customers": {"es": "conversaciones de clientes", "en": "customer conversations"},
    "seed_step_legacy": {"es": "claves heredadas", "en": "legacy keys"},
    "seed_step_sweep": {"es": "barrido", "en": "sweep"},
    "seed_step_erasure": {"es": "supresión", "en": "erasure"},
    "seed_step_outage": {"es": "caída del servidor", "en": "server outage"},
    "signed_in_as": {"es": "Sesión: {user} ({roles})", "en": "Signed in: {user} ({roles})"},
    "sign_in": {"es": "Iniciar sesión", "en": "Sign in"},
    "sign_out": {"es": "Cerrar sesión", "en": "Sign out"},
    "sign_in_prompt": {"es": "Inicie sesión para ver la memoria de los agentes.", "en": "Sign in to see the agents' memory."},
    "no_roles": {"es": "Su identidad ({user}) no tiene ningún rol asignado.", "en": "Your identity ({user}) has no role assigned."},
    "forbidden": {"es": "Esta página requiere el rol «{role}».", "en": "This page requires the '{role}' role."},
    # Memory page
    "memory_title": {"es": "Memoria entre conversaciones", "en": "Cross-thread memory"},
    "memory_caption": {"es": "Tabla `store` de PostgresStore, leída sin refrescar TTL. Embeddings: {emb}.",
                       "en": "PostgresStore `store` table, read without refreshing TTLs. Embeddings: {emb}."},
    "documents": {"es": "Documentos", "en": "Documents"},
    "namespaces": {"es": "Namespaces", "en": "Namespaces"},
    "vectors": {"es": "Vectores", "en": "Vectors"},
    "expired": {"es": "Caducados sin barrer", "en": "Expired, not yet swept"},
    "by_root": {"es": "Documentos por raíz de namespace", "en": "Documents by namespace root"},
    "top_prefixes": {"es": "Prefijos con más documentos (top {n})", "en": "Prefixes with most documents (top {n})"},
    "policy": {"es": "Política de TTL en vigor", "en": "TTL policy in force"},
    "alarm_title": {"es": "Alarma: clientes con más de {n} documentos", "en": "Alarm: customers with more than {n} documents"},
    "alarm_caption": {
        "es": "El esquema cerrado (`pref-{{tipo}}`, {n} tipos) no permite más de {n} documentos por cliente: algo escribe claves fuera del esquema.",
        "en": "The closed schema (`pref-{{tipo}}`, {n} tipos) allows at most {n} documents per customer: something writes keys outside it.",
    },
    "alarm_none": {"es": "Ningún cliente supera {n} documentos.", "en": "No customer exceeds {n} documents."},
    "drill_title": {"es": "Ver un namespace", "en": "Open a namespace"},
    "drill_input": {"es": "Namespace (clientes.C9) o id (C9)", "en": "Namespace (clientes.C9) or id (C9)"},
    "drill_none": {"es": "Ningún namespace se llama exactamente «{q}».", "en": "No namespace is named exactly '{q}'."},
    "drill_pick": {"es": "Varios namespaces coinciden", "en": "Several namespaces match"},
    "drill_items": {"es": "{prefix}: {n} documentos", "en": "{prefix}: {n} documents"},
    "page": {"es": "Página", "en": "Page"},
    # Preferences page
    "prefs_title": {"es": "Escrituras de preferencias por conversación", "en": "Preference writes per conversation"},
    "prefs_caption": {
        "es": "Escrituras de `recordar_preferencia` (registro `core_memory_writes`, incluidas las sobrescritas) entre conversaciones de clientes que empezaron ese día. Objetivo: {target}.",
        "en": "`recordar_preferencia` writes (log `core_memory_writes`, overwritten ones included) over customer conversations started that day. Target: {target}.",
    },
    "period": {"es": "Periodo", "en": "Period"},
    "conversations": {"es": "Conversaciones", "en": "Conversations"},
    "pref_writes": {"es": "Escrituras de preferencias", "en": "Preference writes"},
    "ratio": {"es": "Escrituras por conversación", "en": "Writes per conversation"},
    "target": {"es": "objetivo", "en": "target"},
    "by_tipo": {"es": "Por tipo", "en": "By tipo"},
    "writers": {"es": "Conversaciones que escribieron", "en": "Conversations that wrote"},
    "no_data": {"es": "Sin datos en este periodo.", "en": "No data in this period."},
    "applied_title": {"es": "Preferencias aplicadas", "en": "Preferences applied"},
    "applied_caption": {
        "es": "Propuestas `proponer_entrega` de las {n} conversaciones de clientes más recientes, comparadas con la última `recordar_preferencia` del cliente anterior a la propuesta (vistas canónicas de checkpoints).",
        "en": "`proponer_entrega` proposals of the {n} most recent customer conversations, against the customer's latest `recordar_preferencia` before the proposal (canonical checkpoint views).",
    },
    "applied_rate": {"es": "Siguieron la preferencia", "en": "Followed the preference"},
    "applied_with_pref": {"es": "Propuestas con preferencia vigente", "en": "Proposals with a preference in force"},
    "applied_changed": {"es": "Cambiadas por la memoria", "en": "Changed by the memory"},
    "applied_useless": {
        "es": "Ninguna propuesta cambió por una preferencia: la memoria no sirve para nada ahora mismo.",
        "en": "No proposal changed because of a preference: the memory is useless right now.",
    },
    "applied_none": {"es": "Aún no hay propuestas con una preferencia vigente.", "en": "No proposal with a preference in force yet."},
}


def add_strings(strings: dict[str, dict[str, str]]) -> None:
    """Let a page module register its own strings (keys must not clash)."""
    clash = set(strings) & set(STRINGS)
    if clash and any(STRINGS[k] != strings[k] for k in clash):
        raise KeyError(f"UI string keys defined twice: {sorted(clash)}")
    STRINGS.update(strings)


def lang() -> str:
    return st.session_state.get("lang", "es")


def t(key: str, **kwargs) -> str:
    entry = STRINGS[key]
    text = entry.get(lang()) or entry["es"]
    return text.format(**kwargs) if kwargs else text
