"""UI strings of the Erasure and Erasure register pages (Spanish default, English), registered on import.

dashboard.py imports this module from the pages' navigation entries, because the page titles are
needed before the pages themselves run.
"""
from __future__ import annotations

from ui.i18n import add_strings

PAGE_TITLE = "erasure_page"
REGISTER_PAGE_TITLE = "erasure_register_page"

add_strings({
    "erasure_page": {"es": "Borrado", "en": "Erasure"},
    "erasure_register_page": {"es": "Registro de borrados", "en": "Erasure register"},
    # Erasure page
    "erasure_title": {"es": "Borrar todo lo que los agentes recuerdan de un cliente",
                      "en": "Erase everything the agents remember about a customer"},
    "erasure_caption": {
        "es": "Documentos de `store` bajo `clientes.<id>` (namespaces anidados, vectores y caducados incluidos), los hilos "
              "de checkpoints del cliente y nuestros registros que lo nombran. Se repite hasta que todas las consultas de "
              "recuento dan 0 y la solicitud queda en el registro con su evidencia. Obligación: el mismo día.",
        "en": "`store` documents under `clientes.<id>` (nested namespaces, vectors and expired rows included), the "
              "customer's checkpoint threads and our logs that name them. It repeats until every zero-count query is 0, "
              "and the request is kept in the register with its evidence. Obligation: the same day.",
    },
    "erasure_customer": {"es": "Id del cliente (p. ej. C9)", "en": "Customer id (e.g. C9)"},
    "erasure_preview": {"es": "Vista previa (no borra nada)", "en": "Preview (deletes nothing)"},
    "erasure_preview_title": {"es": "Qué se borraría de `{prefix}`", "en": "What would be deleted for `{prefix}`"},
    "erasure_preview_at": {"es": "Leído a las {at}", "en": "Read at {at}"},
    "erasure_table": {"es": "Tabla", "en": "Table"},
    "erasure_rows": {"es": "Filas", "en": "Rows"},
    "erasure_namespace": {"es": "Namespace", "en": "Namespace"},
    "erasure_documents": {"es": "Documentos", "en": "Documents"},
    "erasure_threads": {"es": "Hilos de checkpoints ({n})", "en": "Checkpoint threads ({n})"},
    "erasure_nothing": {
        "es": "No hay nada de «{id}». Borrar solo dejará constancia en el registro.",
        "en": "There is nothing about '{id}'. Erasing will only leave a record in the register.",
    },
    "erasure_start": {"es": "Borrar…", "en": "Erase…"},
    "erasure_confirm_title": {"es": "Confirmar el borrado", "en": "Confirm the erasure"},
    "erasure_confirm_body": {
        "es": "Se borrarán de forma irreversible **{total}** filas que nombran a **{id}**. Escriba el id del cliente "
              "para confirmar.",
        "en": "**{total}** rows naming **{id}** will be deleted irreversibly. Type the customer id to confirm.",
    },
    "erasure_confirm_input": {"es": "Repita el id del cliente", "en": "Type the customer id again"},
    "erasure_confirm_button": {"es": "Borrar definitivamente", "en": "Erase for good"},
    "erasure_confirm_mismatch": {"es": "El id no coincide: no se ha borrado nada.",
                                 "en": "The id does not match: nothing was deleted."},
    "erasure_running": {"es": "Borrando {id}…", "en": "Erasing {id}…"},
    "erasure_step_counting": {"es": "Contando lo que hay antes de borrar…", "en": "Counting what is there before deleting…"},
    "erasure_step_store": {"es": "Pasada {p}: `store` vaciado ({n} filas borradas hasta ahora)",
                           "en": "Pass {p}: `store` emptied ({n} rows deleted so far)"},
    "erasure_step_threads": {"es": "Pasada {p}: {n} hilos de checkpoints borrados con `delete_thread`",
                             "en": "Pass {p}: {n} checkpoint threads deleted with `delete_thread`"},
    "erasure_step_logs": {"es": "Pasada {p}: registros propios borrados ({n} filas hasta ahora)",
                          "en": "Pass {p}: our logs deleted ({n} rows so far)"},
    "erasure_step_evidence": {"es": "Pasada {p}: consultas de recuento: {n} filas quedan",
                              "en": "Pass {p}: zero-count queries: {n} rows remain"},
    "erasure_step_done": {"es": "Terminado", "en": "Finished"},
    "erasure_done_label": {"es": "Borrado de {id} terminado", "en": "Erasure of {id} finished"},
    "erasure_complete": {
        "es": "Borrado completo de **{id}**: todas las consultas de recuento dan 0.",
        "en": "Erasure of **{id}** complete: every zero-count query returns 0.",
    },
    "erasure_incomplete": {"es": "Borrado INCOMPLETO de **{id}**: {report}", "en": "Erasure of **{id}** INCOMPLETE: {report}"},
    "erasure_failed": {"es": "El borrado ha fallado: {error}. Si llegó a empezar, consta en el registro como «failed».",
                       "en": "The erasure failed: {error}. If it had started, the register has it as 'failed'."},
    "erasure_request": {
        "es": "Solicitud n.º {rid} · operador {operator} · {passes} pasada(s) · {seconds:.2f} s hasta cero",
        "en": "Request #{rid} · operator {operator} · {passes} pass(es) · {seconds:.2f} s to zero",
    },
    "erasure_evidence_title": {"es": "Evidencia: las dos consultas de recuento cero",
                               "en": "Evidence: both zero-count queries"},
    "erasure_evidence_caption": {
        "es": "Las consultas del procedimiento sobre `store` y `store_vectors`, corregidas para ver también los "
              "namespaces anidados (prefijo exacto o `LIKE` escapado), tal como se ejecutaron.",
        "en": "The procedure's queries on `store` and `store_vectors`, corrected to also see nested namespaces "
              "(exact prefix or escaped `LIKE`), exactly as they ran.",
    },
    "erasure_result_line": {"es": "Resultado: **{n}** · ejecutada el {at}", "en": "Result: **{n}** · run at {at}"},
    "erasure_other_evidence": {"es": "Tablas de checkpoints y registros propios (consultas y resultados)",
                               "en": "Checkpoint tables and our logs (queries and results)"},
    "erasure_counts": {"es": "Filas por tabla", "en": "Rows per table"},
    "erasure_before": {"es": "Antes", "en": "Before"},
    "erasure_deleted": {"es": "Borradas", "en": "Deleted"},
    "erasure_after": {"es": "Después", "en": "After"},
    "erasure_download": {"es": "Descargar la evidencia (JSON)", "en": "Download the evidence (JSON)"},
    "erasure_toast": {"es": "Borrado de {id} registrado (solicitud n.º {rid}).",
                      "en": "Erasure of {id} recorded (request #{rid})."},
    "erasure_to_register": {"es": "Ver el registro de borrados", "en": "Open the erasure register"},
    # Register page
    "erasure_register_title": {"es": "Registro de borrados", "en": "Erasure register"},
    "erasure_register_caption": {
        "es": "Cada solicitud: quién la hizo, cuándo, el tiempo hasta cero (obligación: el mismo día, UTC) y las "
              "re-comprobaciones (en cada barrido programado y con el botón), que detectan datos que han vuelto "
              "(p. ej. una escritura tardía de checkpoint que recrea un hilo borrado).",
        "en": "Each request: who made it, when, the time to zero (obligation: the same day, UTC) and the re-checks "
              "(at every scheduled sweep and with the button), which catch data that came back (e.g. a late "
              "checkpoint write recreating a deleted thread).",
    },
    "erasure_register_empty": {"es": "Aún no hay solicitudes de borrado. Tramite la primera en la página Borrado: "
                                      "cada borrado queda registrado aquí con su evidencia.",
                                "en": "No erasure request yet. Make the first one on the Erasure page: every erasure "
                                      "is recorded here with its evidence."},
    "erasure_requests": {"es": "Solicitudes", "en": "Requests"},
    "erasure_completed": {"es": "Completas", "en": "Complete"},
    "erasure_same_day": {"es": "El mismo día", "en": "Same day"},
    "erasure_came_back": {"es": "Con datos reaparecidos", "en": "With data back"},
    "erasure_pick": {"es": "Solicitud", "en": "Request"},
    "erasure_pick_label": {"es": "n.º {rid} · {id} · {at}", "en": "#{rid} · {id} · {at}"},
    "erasure_rechecks_title": {"es": "Re-comprobaciones", "en": "Re-checks"},
    "erasure_no_rechecks": {"es": "Sin re-comprobaciones todavía.", "en": "No re-check yet."},
    "erasure_recheck_button": {"es": "Re-comprobar ahora", "en": "Re-check now"},
    "erasure_recheck_all": {"es": "Re-comprobar todas", "en": "Re-check all"},
    "erasure_recheck_clean": {"es": "Limpio: todas las consultas dan 0 ({at}).",
                              "en": "Clean: every query returns 0 ({at})."},
    "erasure_recheck_dirty": {
        "es": "Han vuelto datos de **{id}**: {counts}. Bórrelo de nuevo en la página Borrado.",
        "en": "Data about **{id}** came back: {counts}. Erase it again on the Erasure page.",
    },
    "erasure_col_customer": {"es": "Cliente", "en": "Customer"},
    "erasure_col_operator": {"es": "Operador", "en": "Operator"},
    "erasure_col_status": {"es": "Estado", "en": "Status"},
    "erasure_col_requested": {"es": "Solicitado", "en": "Requested"},
    "erasure_col_finished": {"es": "Terminado", "en": "Finished"},
    "erasure_col_seconds": {"es": "Tiempo hasta cero", "en": "Time to zero"},
    "erasure_col_passes": {"es": "Pasadas", "en": "Passes"},
    "erasure_col_before": {"es": "Filas antes", "en": "Rows before"},
    "erasure_col_deleted": {"es": "Borradas", "en": "Deleted"},
    "erasure_col_after": {"es": "Filas después", "en": "Rows after"},
    "erasure_col_last_recheck": {"es": "Última re-comprobación", "en": "Last re-check"},
    "erasure_col_last_clean": {"es": "Limpia", "en": "Clean"},
    "erasure_col_rechecks": {"es": "Re-comprobaciones", "en": "Re-checks"},
    "erasure_col_dirty": {"es": "Con datos", "en": "With data"},
    "erasure_rechecked_all": {"es": "{n} solicitudes re-comprobadas, {dirty} con datos reaparecidos.",
                              "en": "{n} requests re-checked, {dirty} with data back."},
})

# Attribution (core/privacy/subjects.py): sources, residue threads, coverage, interrupted requests.
add_strings({
    "erasure_sources_title": {"es": "Hilos atribuidos al cliente, con la fuente que encontró cada uno",
                              "en": "Threads attributed to the customer, with the source that found each one"},
    "erasure_col_thread": {"es": "Hilo", "en": "Thread"},
    "erasure_col_sources": {"es": "Fuentes", "en": "Sources"},
    "erasure_sources_counts": {"es": "Por fuente: {counts}", "en": "Per source: {counts}"},
    "erasure_source_error": {"es": "La fuente «{source}» no pudo ejecutarse: {error}",
                             "en": "Source “{source}” could not run: {error}"},
    "erasure_residue_title": {"es": "Hilos residuales: sin atribuir, pero contienen datos del cliente",
                              "en": "Residue threads: unattributed, but they hold the customer's data"},
    "erasure_residue_caption": {
        "es": "Ninguna fuente atribuye estos hilos al cliente, pero sus checkpoints contienen su id (como palabra "
              "completa) o un valor de sus documentos. Decide cada uno: borrarlo, o dejarlo con un motivo que queda "
              "en el registro y en la evidencia. Sin decisión no se borra y la solicitud queda incompleta.",
        "en": "No source attributes these threads to the customer, but their checkpoints hold the id (as a whole "
              "word) or a value of the customer's documents. Decide each one: erase it, or leave it with a reason "
              "that goes into the register and the evidence. Undecided threads are not erased and the request is "
              "recorded as incomplete."},
    "erasure_residue_none": {"es": "Ningún hilo sin atribuir contiene el id ni valores distintivos del cliente.",
                             "en": "No unattributed thread holds the customer's id or distinctive values."},
    "erasure_residue_thread": {"es": "Hilo `{thread}` — término «{term}» ({kind})",
                               "en": "Thread `{thread}` — term “{term}” ({kind})"},
    "erasure_residue_decision": {"es": "Decisión", "en": "Decision"},
    "erasure_residue_erase": {"es": "Borrar", "en": "Erase"},
    "erasure_residue_leave": {"es": "Dejar (con motivo)", "en": "Leave (with a reason)"},
    "erasure_residue_reason": {"es": "Motivo para dejarlo", "en": "Reason to leave it"},
    "erasure_residue_undecided": {
        "es": "Falta decidir {n} hilo(s) residual(es) (o el motivo de dejarlo): el borrado no empieza sin esa decisión.",
        "en": "{n} residue thread(s) still need a decision (or a reason to leave): the erasure does not start without it."},
    "erasure_terms_title": {"es": "Términos buscados y lo comunes que son", "en": "Terms searched and how common they are"},
    "erasure_col_term": {"es": "Término", "en": "Term"},
    "erasure_col_kind": {"es": "Tipo", "en": "Kind"},
    "erasure_col_customers": {"es": "Clientes con ese valor", "en": "Customers holding it"},
    "erasure_col_threads_matched": {"es": "Hilos donde aparece", "en": "Threads where it appears"},
    "erasure_col_common": {"es": "Común (no propone hilos)", "en": "Common (proposes no thread)"},
    "erasure_col_snippet": {"es": "Fragmento", "en": "Snippet"},
    "erasure_common_only": {
        "es": "{n} hilo(s) sin atribuir contienen solo términos comunes (p. ej. una tienda): no se proponen.",
        "en": "{n} unattributed thread(s) hold only common terms (e.g. a store id): not proposed."},
    "erasure_coverage": {
        "es": "Cobertura de atribución: {threads} de los hilos ({t_share}) y {bytes} de los bytes de checkpoints "
              "({b_share}) no se atribuyen a ningún cliente por ninguna fuente.",
        "en": "Attribution coverage: {threads} of the threads ({t_share}) and {bytes} of the checkpoint bytes "
              "({b_share}) are attributed to no customer by any source."},
    "erasure_coverage_fix": {
        "es": "Para una atribución exacta, etiqueta las ejecuciones: `agent.invoke(..., config={\"metadata\": "
              "{\"cliente_id\": cliente_id}})`; o configura un patrón de thread_id (`SUBJECT_THREAD_PATTERNS`, "
              "p. ej. `cliente-{id}-*`) o una consulta (`SUBJECT_THREAD_QUERY`). Hasta entonces, el borrado "
              "depende del escaneo de residuos.",
        "en": "For exact attribution, tag runs: `agent.invoke(..., config={\"metadata\": {\"cliente_id\": "
              "customer_id}})`; or configure a thread-id pattern (`SUBJECT_THREAD_PATTERNS`, e.g. "
              "`cliente-{id}-*`) or a query (`SUBJECT_THREAD_QUERY`). Until then, erasure relies on the residue scan."},
    "erasure_coverage_query": {"es": "La consulta configurada no cuenta aquí (es por cliente).",
                               "en": "The configured query is not counted here (it runs per customer)."},
    "erasure_exclusions": {"es": "Completo con exclusiones nombradas: {report}",
                           "en": "Complete with named exclusions: {report}"},
    "erasure_col_exclusions": {"es": "Exclusiones", "en": "Exclusions"},
    "erasure_col_resumed_by": {"es": "Reanudada en", "en": "Resumed by"},
    "erasure_col_resumable": {"es": "Reanudable", "en": "Resumable"},
    "erasure_resume_button": {"es": "Reanudar esta solicitud", "en": "Resume this request"},
    "erasure_resume_help": {
        "es": "La solicitud se interrumpió, falló o quedó «running» sin proceso: se vuelve a ejecutar como una "
              "nueva solicitud con las decisiones de residuos registradas.",
        "en": "The request was interrupted, failed or was left 'running' with no process: it runs again as a new "
              "request with the residue decisions on record."},
    "erasure_resumed": {"es": "Reanudada como solicitud #{rid}: {status}", "en": "Resumed as request #{rid}: {status}"},
    "erasure_interrupted": {
        "es": "El borrado de {id} se interrumpió; quedó registrado como «interrupted» con sus recuentos y se puede "
              "reanudar desde el registro.",
        "en": "The erasure of {id} was interrupted; it is recorded as 'interrupted' with its counts and can be "
              "resumed from the register."},
})
