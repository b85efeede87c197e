"""UI strings of the Degradation page (Spanish default, English), registered on import.

dashboard.py imports this module from the page's navigation entry, because the page title is
needed before the page itself runs.
"""
from __future__ import annotations

from ui.i18n import add_strings

PAGE_TITLE = "degr_page"

add_strings({
    "degr_page": {"es": "Degradación", "en": "Degradation"},
    "degr_title": {"es": "Persistencia degradada de las réplicas", "en": "Replicas' degraded persistence"},
    "degr_caption": {
        "es": "Cada réplica de agentes publica su latido en `core_replica_heartbeat`: **ok**, **degradada** (sin "
              "PostgreSQL: guarda en memoria y el guardián deniega herramientas de riesgo ALTO/CRÍTICO) o **silenciosa** "
              "(latido con más de tres intervalos). Se refresca sola cada {every} s.",
        "en": "Every agent replica publishes its heartbeat in `core_replica_heartbeat`: **ok**, **degraded** (no "
              "PostgreSQL: it buffers in memory and the guard denies HIGH/CRITICAL tools) or **silent** (heartbeat "
              "older than three intervals). Refreshes itself every {every} s.",
    },
    "degr_read_at": {"es": "Leído a las {at}", "en": "Read at {at}"},
    "degr_db_down": {
        "es": "La base de datos no responde ({error}). Se muestra la última lectura buena, de las {at} (hace {ago} s).",
        "en": "The database does not answer ({error}). Showing the last good reading, from {at} ({ago} s ago).",
    },
    "degr_db_down_never": {
        "es": "La base de datos no responde ({error}) y este proceso aún no tiene ninguna lectura buena.",
        "en": "The database does not answer ({error}) and this process has no good reading yet.",
    },
    "degr_probe": {"es": "Sonda del panel", "en": "Dashboard probe"},
    "degr_probe_ok": {"es": "{ms:.0f} ms", "en": "{ms:.0f} ms"},
    "degr_probe_down": {"es": "sin respuesta", "en": "no answer"},
    "degr_replicas": {"es": "Réplicas", "en": "Replicas"},
    "degr_degraded": {"es": "Degradadas", "en": "Degraded"},
    "degr_silent": {"es": "Silenciosas", "en": "Silent"},
    "degr_episodes": {"es": "Episodios", "en": "Episodes"},
    "degr_denials": {"es": "Denegaciones del guardián", "en": "Guard denials"},
    "degr_refusals": {"es": "Rechazos del serializador", "en": "Serializer refusals"},
    "degr_all_ok": {"es": "Todas las réplicas persisten en PostgreSQL.", "en": "Every replica persists to PostgreSQL."},
    "degr_some_degraded": {"es": "{n} réplica(s) degradada(s) o silenciosa(s).", "en": "{n} replica(s) degraded or silent."},
    "degr_unknown": {"es": "Desconocidas", "en": "Unknown"},
    "degr_some_unknown": {
        "es": "{n} réplica(s) en estado desconocido: las tablas de salud no se pueden leer y no hay endpoint de "
              "métricas que responda por ellas. Se muestra la edad de la última lectura.",
        "en": "{n} replica(s) in unknown state: the health tables cannot be read and no metrics endpoint answers "
              "for them. The age of the last reading is shown.",
    },
    "degr_no_replicas": {"es": "Ninguna réplica ha publicado aún su latido: cada réplica de agentes con el checkpointer dual "
                                "(core.checkpoints.dual_saver) lo publica al arrancar; compruebe que las réplicas lo usan y "
                                "escriben en esta base de datos.",
                          "en": "No replica has published a heartbeat yet: every agent replica with the dual checkpointer "
                                "(core.checkpoints.dual_saver) publishes one when it starts; check that the replicas use it "
                                "and write to this database."},
    "degr_replicas_title": {"es": "Réplicas", "en": "Replicas"},
    "degr_timeline": {"es": "Episodios de degradación", "en": "Degradation episodes"},
    "degr_no_episodes": {"es": "Ningún episodio de degradación registrado.", "en": "No degradation episode recorded."},
    "degr_ongoing": {"es": "en curso", "en": "ongoing"},
    "degr_recorded": {"es": "resincronizado", "en": "resynced"},
    "degr_denials_title": {"es": "Herramientas denegadas por el guardián", "en": "Tools the guard denied"},
    "degr_no_denials": {"es": "Ninguna denegación.", "en": "No denial."},
    "degr_refused_sql": {"es": "Rechazables en SQL", "en": "Refusable in SQL"},
    "degr_refused_sql_help": {
        "es": "Payloads en la base que el serializador rechazaría (decodificador SQL, columna refused_type), según la "
              "extracción incremental (barrido y página de Preferencias); última: {at}.",
        "en": "Payloads in the database the serializer would refuse (SQL decoder, column refused_type), as found by the "
              "incremental extraction (sweep job and Preferences page); last run: {at}.",
    },
    "degr_refused_sql_title": {"es": "Payloads rechazables encontrados en SQL", "en": "Refusable payloads found in SQL"},
    "degr_refused_sql_caption": {
        "es": "Escrituras de checkpoints que el decodificador SQL marca rechazadas, sin ejecutar nada, aunque ningún agente "
              "haya intentado cargarlas todavía. Los valores de canal (checkpoint_blobs) no se cuentan aquí: la página "
              "Checkpoints los marca hilo a hilo (columna refused_value).",
        "en": "Checkpoint writes the SQL decoder marks refused, without executing anything, even before any agent tried "
              "to load them. Channel values (checkpoint_blobs) are not counted here: the Checkpoints page marks them "
              "thread by thread (column refused_value).",
    },
    "degr_no_refused_sql": {"es": "Ninguno.", "en": "None."},
    "degr_refusals_title": {"es": "Payloads rechazados por el serializador", "en": "Payloads the serializer refused"},
    "degr_no_refusals": {"es": "Ningún rechazo.", "en": "No refusal."},
    "degr_time": {"es": "Hora", "en": "Time"},
})
