"""UI strings of the Checkpoints page (Spanish default, English), registered on import.

dashboard.py imports this module from the page's navigation entry, because the page title is
needed before the page itself runs.
"""
from __future__ import annotations

from ui.i18n import add_strings

PAGE_TITLE = "ckpt_page"

add_strings({
    "ckpt_page": {"es": "Checkpoints", "en": "Checkpoints"},
    "ckpt_title": {"es": "Historial de checkpoints de un hilo", "en": "A thread's checkpoint history"},
    "ckpt_caption": {
        "es": "Vistas `core_checkpoints_view` y `core_checkpoint_writes_view`: los payloads se decodifican en SQL "
              "(msgpack → JSON) sin ejecutar nada; un blob indescifrable se marca y el resto del historial se ve.",
        "en": "Views `core_checkpoints_view` and `core_checkpoint_writes_view`: payloads are decoded in SQL "
              "(msgpack → JSON) without executing anything; an undecodable blob is marked and the rest of the history shows.",
    },
    "ckpt_view": {"es": "Vista", "en": "View"},
    "ckpt_view_thread": {"es": "Hilo", "en": "Thread"},
    "ckpt_view_storage": {"es": "Almacenamiento", "en": "Storage"},
    "ckpt_thread_id": {"es": "Id del hilo (exacto)", "en": "Thread id (exact)"},
    "ckpt_find": {"es": "Buscar hilos", "en": "Find threads"},
    "ckpt_find_by": {"es": "Buscar por", "en": "Find by"},
    "ckpt_by_customer": {"es": "Cliente (metadata, patrones, enlaces «hilo», registros)",
                         "en": "Customer (metadata, patterns, «hilo» links, logs)"},
    "ckpt_by_recent": {"es": "Actividad reciente", "en": "Recent activity"},
    "ckpt_customer_id": {"es": "Id del cliente (exacto)", "en": "Customer id (exact)"},
    "ckpt_pick_hint": {"es": "Seleccione una fila para abrir el hilo.", "en": "Select a row to open the thread."},
    "ckpt_no_customer": {"es": "Ninguna fuente atribuye hilos a «{q}» (metadata, patrones, enlaces «hilo», registros).",
                         "en": "No source attributes threads to '{q}' (metadata, patterns, «hilo» links, logs)."},
    "ckpt_no_thread": {"es": "Ningún hilo se llama exactamente «{q}».", "en": "No thread is named exactly '{q}'."},
    "ckpt_no_recent": {"es": "Aún no hay checkpoints: aparecen en cuanto un agente con el checkpointer de PostgreSQL "
                              "conversa contra esta base de datos (o siembre la demo: `python -m core.demo`).",
                        "en": "No checkpoints yet: they appear as soon as an agent with the PostgreSQL checkpointer "
                              "talks against this database (or seed the demo: `python -m core.demo`)."},
    "ckpt_type_thread": {"es": "Elija un hilo en la lista de arriba (los más recientes, o los de un cliente) o escriba su id.",
                         "en": "Pick a thread in the list above (the most recent, or a customer's) or type its id."},
    "ckpt_checkpoints": {"es": "Checkpoints", "en": "Checkpoints"},
    "ckpt_steps": {"es": "Último paso", "en": "Last step"},
    "ckpt_writes": {"es": "Escrituras", "en": "Writes"},
    "ckpt_blob_bytes": {"es": "Bytes de blobs", "en": "Blob bytes"},
    "ckpt_write_bytes": {"es": "Bytes de escrituras", "en": "Write bytes"},
    "ckpt_customer": {"es": "Cliente", "en": "Customer"},
    "ckpt_timeline": {"es": "Línea de tiempo: pasos", "en": "Timeline: steps"},
    "ckpt_step": {"es": "Paso", "en": "Step"},
    "ckpt_time": {"es": "Hora", "en": "Time"},
    "ckpt_undecodable": {
        "es": "{n} escrituras de este hilo no se pueden decodificar (columna `undecodable`); el resto se muestra.",
        "en": "{n} writes of this thread cannot be decoded (column `undecodable`); the rest is shown.",
    },
    "ckpt_refused": {
        "es": "{n} pasos de este hilo (paso {steps}) contienen un payload que el serializador rechaza: {types} no está en su "
              "lista permitida. Los agentes no pueden cargar este hilo; aquí se muestra sin ejecutar nada (columnas "
              "`refused_writes` y `refused_value`).",
        "en": "{n} steps of this thread (step {steps}) hold a payload the serializer refuses: {types} is not in its "
              "allowlist. The agents cannot load this thread; it is shown here without executing anything (columns "
              "`refused_writes` and `refused_value`).",
    },
    "ckpt_refused_message": {
        "es": "Mensaje rechazado (paso {step}, canal `{channel}`): el payload nombra `{type}`, fuera de la lista permitida "
              "del serializador. No se ha ejecutado nada; el resto de la conversación sigue.",
        "en": "Refused message (step {step}, channel `{channel}`): the payload names `{type}`, outside the serializer's "
              "allowlist. Nothing was executed; the rest of the conversation follows.",
    },
    "ckpt_undecodable_message": {
        "es": "Mensaje indescifrable (paso {step}): {reason}",
        "en": "Undecodable message (step {step}): {reason}",
    },
    "ckpt_step_writes": {"es": "Escrituras de cada paso", "en": "Each step's writes"},
    "ckpt_step_writes_caption": {
        "es": "Escrituras pendientes guardadas sobre un checkpoint: las hicieron las tareas del paso siguiente.",
        "en": "Pending writes stored on a checkpoint: the next step's tasks made them.",
    },
    "ckpt_checkpoint": {"es": "Checkpoint", "en": "Checkpoint"},
    "ckpt_all_steps": {"es": "Todos los pasos", "en": "All steps"},
    "ckpt_step_label": {"es": "paso {step} · {ts} · {id}", "en": "step {step} · {ts} · {id}"},
    "ckpt_conversation": {"es": "Mensajes (humano, IA, herramienta)", "en": "Messages (human, AI, tool)"},
    "ckpt_tool_calls": {"es": "Llama a: {calls}", "en": "Calls: {calls}"},
    "ckpt_no_writes": {"es": "Sin escrituras en este paso.", "en": "No writes at this step."},
    "ckpt_diff": {"es": "Diferencias entre dos checkpoints", "en": "Diff between two checkpoints"},
    "ckpt_diff_old": {"es": "Anterior", "en": "Older"},
    "ckpt_diff_new": {"es": "Posterior", "en": "Newer"},
    "ckpt_diff_only_changes": {"es": "Solo canales cambiados", "en": "Changed channels only"},
    "ckpt_diff_summary": {"es": "{n} canales cambiados de {total}", "en": "{n} channels changed of {total}"},
    "ckpt_diff_need_two": {"es": "El hilo tiene un solo checkpoint.", "en": "The thread has a single checkpoint."},
    "ckpt_storage_title": {"es": "Tablas de checkpoints", "en": "Checkpoint tables"},
    "ckpt_storage_caption": {
        "es": "Las tablas de checkpoints crecen sin límite: la retención la aplica el barrido. Tamaño en disco con índices y TOAST.",
        "en": "Checkpoint tables grow without bound: the sweep applies retention. On-disk size with indexes and TOAST.",
    },
    "ckpt_table_rows": {"es": "{table}: filas", "en": "{table}: rows"},
    "ckpt_largest": {"es": "Hilos más grandes (top {n}, calculado en el último barrido: columna computed_at)",
                     "en": "Largest threads (top {n}, computed at the last sweep: column computed_at)"},
    "ckpt_bytes": {"es": "Bytes", "en": "Bytes"},
    "ckpt_open_hint": {"es": "Seleccione una fila para abrir el hilo en la vista Hilo.",
                       "en": "Select a row to open the thread in the Thread view."},
})
