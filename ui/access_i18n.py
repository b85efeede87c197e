"""UI strings of the Access and Access register pages, and of the registers' verify button (es/en)."""
from __future__ import annotations

from ui.i18n import add_strings

PAGE_TITLE = "access_page"
REGISTER_PAGE_TITLE = "access_register_page"

add_strings({
    "access_page": {"es": "Acceso", "en": "Access"},
    "access_register_page": {"es": "Registro de accesos", "en": "Access register"},
    "access_title": {"es": "Derecho de acceso: todo lo que los agentes guardan de un cliente",
                     "en": "Right of access: everything the agents hold about a customer"},
    "access_caption": {
        "es": "Documentos de `store` bajo `clientes.<id>` (anidados y caducados incluidos), sus conversaciones "
              "descodificadas, nuestros registros y los registros de borrado. Se lee por SQL sin refrescar ningún TTL. "
              "Cada exportación queda en el registro de accesos con el sha256 del fichero; el fichero no se guarda.",
        "en": "`store` documents under `clientes.<id>` (nested and expired included), their decoded conversations, our "
              "logs and the erasure register. Read by SQL, refreshing no TTL. Every export is kept in the access "
              "register with the file's sha256; the file itself is not stored.",
    },
    "access_customer": {"es": "Id del cliente (p. ej. C9)", "en": "Customer id (e.g. C9)"},
    "access_preview": {"es": "Ver recuentos", "en": "Show counts"},
    "access_counts_title": {"es": "Qué se exportaría de `{prefix}`", "en": "What would be exported for `{prefix}`"},
    "access_read_at": {"es": "Leído a las {at}", "en": "Read at {at}"},
    "access_source": {"es": "Fuente", "en": "Source"},
    "access_items": {"es": "Elementos", "en": "Items"},
    "access_nothing": {"es": "No hay ningún dato sobre {id} en las fuentes consultadas; la exportación lo dirá así.",
                       "en": "There is no data about {id} in the sources searched; the export will say so."},
    "access_caveat": {
        "es": "Cobertura: {n} hilos de la base de datos no pueden atribuirse a ningún sujeto; si alguno es de este "
              "cliente, no estará en la exportación.",
        "en": "Coverage: {n} threads in the database cannot be attributed to any subject; if any is this customer's, "
              "it will not be in the export.",
    },
    "access_sources": {"es": "Fuentes consultadas", "en": "Sources searched"},
    "access_format": {"es": "Formato", "en": "Format"},
    "access_format_json": {"es": "JSON (legible por máquina)", "en": "JSON (machine-readable)"},
    "access_format_html": {"es": "Documento legible (HTML, imprimible a PDF)", "en": "Readable document (HTML, prints to PDF)"},
    "access_lang": {"es": "Idioma del documento", "en": "Document language"},
    "access_download": {"es": "Exportar y descargar", "en": "Export and download"},
    "access_download_help": {
        "es": "El fichero se genera al pulsar, se registra con su sha256 y no se guarda en el servidor.",
        "en": "The file is generated on click, registered with its sha256 and not kept on the server.",
    },
    "access_exports_of": {"es": "Exportaciones registradas de {id}", "en": "Registered exports of {id}"},
    "access_to_register": {"es": "Ver el registro de accesos", "en": "Open the access register"},
    # register page
    "access_register_title": {"es": "Registro de accesos", "en": "Access register"},
    "access_register_caption": {
        "es": "Quién exportó qué de quién y cuándo, con el sha256 del fichero entregado: una copia presentada después "
              "se comprueba con su sha256.",
        "en": "Who exported what about whom and when, with the sha256 of the file handed over: a copy shown later is "
              "checked against its sha256.",
    },
    "access_register_empty": {"es": "Todavía no hay exportaciones.", "en": "No exports yet."},
    "access_col_customer": {"es": "Cliente", "en": "Customer"},
    "access_col_operator": {"es": "Operador", "en": "Operator"},
    "access_col_at": {"es": "Exportado", "en": "Exported"},
    "access_col_format": {"es": "Formato", "en": "Format"},
    "access_col_lang": {"es": "Idioma", "en": "Language"},
    "access_col_size": {"es": "Bytes", "en": "Bytes"},
    "access_col_items": {"es": "Elementos", "en": "Items"},
    # verification (both register pages)
    "chain_verify": {"es": "Verificar la cadena de hashes", "en": "Verify the hash chain"},
    "chain_ok": {"es": "Cadena íntegra: {n} filas selladas, ninguna editada ni borrada. Hash de cabeza: `{head}`",
                 "en": "Chain intact: {n} sealed rows, none edited or removed. Head hash: `{head}`"},
    "chain_broken": {"es": "Cadena ROTA en {table} #{row}: {problem}. {detail}",
                     "en": "Chain BROKEN at {table} #{row}: {problem}. {detail}"},
    "chain_help": {
        "es": "Cada fila final guarda el sha256 de su contenido y el hash de la anterior. Guarde el hash de cabeza "
              "fuera de la base de datos para detectar también que se corten las últimas filas.",
        "en": "Every final row keeps the sha256 of its content and the previous row's hash. Keep the head hash outside "
              "the database to also catch the newest rows being cut off.",
    },
    "chain_problem_edited": {"es": "editada después de sellarse", "en": "edited after it was sealed"},
    "chain_problem_removed": {"es": "borrada", "en": "removed"},
    "chain_problem_link_edited": {"es": "eslabón de la cadena alterado", "en": "chain link altered"},
    "chain_problem_link_removed": {"es": "eslabón de la cadena borrado", "en": "chain link removed"},
    "chain_problem_unsealed": {"es": "final pero fuera de la cadena", "en": "final but not in the chain"},
})
