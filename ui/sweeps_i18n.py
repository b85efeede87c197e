"""UI strings of the Sweeps page (Spanish default, English), registered on import.

dashboard.py imports this module from the page's navigation entry, because the page title is
needed before the page itself runs.
"""
from __future__ import annotations

from ui.i18n import add_strings

PAGE_TITLE = "page_sweeps"

add_strings({
    "page_sweeps": {"es": "Barridos", "en": "Sweeps"},
    "sweeps_title": {"es": "Barridos de TTL y retención de checkpoints", "en": "TTL sweeps and checkpoint retention"},
    "sweeps_caption": {
        "es": "Un CronJob ejecuta `python -m core.sweep` (un solo barrido a la vez, con cerrojo consultivo de PostgreSQL): "
              "borra los documentos caducados de `store` (y sus vectores) y los hilos cuyo último checkpoint supera la retención.",
        "en": "A CronJob runs `python -m core.sweep` (one sweep at a time, under a PostgreSQL advisory lock): it deletes "
              "the expired `store` documents (and their vectors) and the threads whose newest checkpoint exceeds the retention.",
    },
    "sweeps_expired_now": {"es": "Caducados sin barrer ahora, por raíz", "en": "Expired, not yet swept now, by root"},
    "sweeps_state_now": {"es": "Ahora", "en": "Now"},
    "sweeps_expired_metric": {"es": "{root}: caducados", "en": "{root}: expired"},
    "sweeps_last_run": {"es": "Último barrido", "en": "Last sweep"},
    "sweeps_never": {"es": "nunca", "en": "never"},
    "sweeps_runs_chart": {"es": "Documentos borrados por barrido y raíz", "en": "Documents deleted per sweep and root"},
    "sweeps_no_runs": {"es": "Aún no hay barridos registrados: programe el CronJob (deploy/sweep-cronjob.yaml) o lance "
                              "uno ahora con `python -m core.operations.sweep`; los caducados se acumulan hasta entonces.",
                        "en": "No sweep has been logged yet: schedule the CronJob (deploy/sweep-cronjob.yaml) or run one "
                              "now with `python -m core.operations.sweep`; expired rows pile up until then."},
    "sweeps_forecast": {"es": "Caducidades previstas por semana (próximos 12 meses)",
                        "en": "Expected expirations per week (next 12 months)"},
    "sweeps_forecast_caption": {
        "es": "Según `expires_at` hoy: una lectura de clientes o empleados renueva su TTL y la retrasa.",
        "en": "From `expires_at` as of now: a read of clientes or empleados renews their TTL and moves it later.",
    },
    "sweeps_week": {"es": "Semana", "en": "Week"},
    "sweeps_documents": {"es": "Documentos", "en": "Documents"},
    "sweeps_run_start": {"es": "Barrido (n.º, inicio)", "en": "Sweep (no., start)"},
    "sweeps_config": {"es": "Configuración de TTL en vigor", "en": "TTL configuration in force"},
    "sweeps_log": {"es": "Registro de barridos", "en": "Sweep log"},
    "sweeps_now": {"es": "Barrer ahora", "en": "Sweep now"},
    "sweeps_dialog_title": {"es": "Barrido manual", "en": "Manual sweep"},
    "sweeps_dialog_text": {
        "es": "Borra ahora los {n} documentos caducados y los hilos cuyo último checkpoint tenga más de los días indicados. "
              "No se puede deshacer.",
        "en": "Deletes now the {n} expired documents and the threads whose newest checkpoint is older than the given days. "
              "It cannot be undone.",
    },
    "sweeps_retention_days": {"es": "Retención de checkpoints (días)", "en": "Checkpoint retention (days)"},
    "sweeps_dry_run": {"es": "Simulación (contar y listar, sin borrar)", "en": "Dry run (count and list, delete nothing)"},
    "sweeps_confirm": {"es": "Entiendo que el borrado es definitivo", "en": "I understand the deletion is final"},
    "sweeps_run": {"es": "Ejecutar barrido", "en": "Run the sweep"},
    "sweeps_running": {"es": "Barriendo…", "en": "Sweeping…"},
    "sweeps_step_locked": {"es": "Cerrojo obtenido ({detail})", "en": "Lock taken ({detail})"},
    "sweeps_step_ttl": {"es": "Barrido de TTL {detail}", "en": "TTL sweep {detail}"},
    "sweeps_step_retention": {"es": "Retención de checkpoints {detail}", "en": "Checkpoint retention {detail}"},
    "sweeps_step_storage": {"es": "Tamaño por hilo recalculado: {detail} hilos",
                            "en": "Storage per thread recomputed: {detail} threads"},
    "sweeps_step_toolcalls": {"es": "Llamadas a herramientas extraídas de los checkpoints: {detail}",
                              "en": "Tool calls extracted from the checkpoints: {detail}"},
    "sweeps_step_erasure": {"es": "Revisión del registro de supresiones {detail}", "en": "Erasure register re-check {detail}"},
    "sweeps_step_done": {"es": "Terminado: {detail}", "en": "Finished: {detail}"},
    "sweeps_done": {"es": "Barrido {id}: {docs} documentos y {vectors} vectores borrados, {threads} hilos borrados.",
                    "en": "Sweep {id}: {docs} documents and {vectors} vectors deleted, {threads} threads deleted."},
    "sweeps_done_dry": {"es": "Simulación {id}: se borrarían {docs} documentos y {threads} hilos.",
                        "en": "Dry run {id}: {docs} documents and {threads} threads would be deleted."},
    "sweeps_locked": {"es": "Ya hay un barrido en curso (cerrojo ocupado); no se ha hecho nada.",
                      "en": "A sweep is already running (lock held); nothing was done."},
    "sweeps_failed": {"es": "El barrido {id} terminó con error: {error}", "en": "Sweep {id} ended with an error: {error}"},
})
