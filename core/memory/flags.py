"""Customers' memories that need a person's look (issue 56, item 3), read-only, with a count per store.

Four flags, each computed from what the database holds (nothing is written, the agents' data never changes):
- `expiring`: a document that expires within `expiring_days` while its customer had a conversation in the last
  `used_days` days (the agents read the customer's preferences at every turn). The customer's latest conversation is
  the latest of: their threads' latest human message (core_thread_last, by checkpoint metadata), our conversation log
  (core_conversations) and the thread the document's `hilo` back-link names;
- `flapping`: a document written more than `flapping_writes` times in the last 7 days: the writing tools' calls
  (core_tool_calls, attributed to the customer by checkpoint metadata, our conversation log or a document's `hilo`)
  or our write log (core_memory_writes), whichever counts more (they see the same writes of our agents); calls of
  conversations no source attributes are counted apart (`unattributed_writes`), never guessed;
- `contradiction`: two documents of one customer (its namespace and those nested under it) of the same kind of
  preference (`tipo`, else the `pref-{tipo}` key) holding different values, both visible to the agent;
- `provenance_gone`: a document whose writing conversation (its `hilo`, else the last thread our log names) is no
  longer in the checkpoints (erased, deleted by retention or by the agents), or whose writing step was pruned (the
  thread remains, but no checkpoint holding a call that wrote the document does).
Documents past their expiry are hidden from the agent and only wait for the sweep: the flags look at visible ones.

A store manager's flags are those of their stores' customers (core.memory.customer_stores.MINE), counted per store of
theirs; the unscoped read counts every store and the customers of none (`tienda` '').
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pandas as pd

from core.config import Settings, load_settings
from core.db import Database, one
from core.memory import customer_stores
from core.memory.customer_stores import MINE_PREFIXES, MINE_PREFIXES_LARGE, Scope
from core.memory.history import WRITING_TOOLS
from core.memory.reads import scope_prefixes

FLAGS = ("expiring", "flapping", "contradiction", "provenance_gone")
FLAPPING_WINDOW = timedelta(days=7)
ROWS_PER_FLAG = 200  # flagged documents listed per flag (every one is counted)
NO_STORE = ""  # the `tienda` of customers no source puts in a store


class FlagSettingError(ValueError):
    """A flag threshold is unusable (says which and why)."""


@dataclass(frozen=True)
class Thresholds:
    expiring_days: int = 30
    used_days: int = 30
    flapping_writes: int = 3

    def __post_init__(self) -> None:
        for name in ("expiring_days", "used_days", "flapping_writes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise FlagSettingError(f"{name} must be a whole number >= 1, got {value!r}")

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> Thresholds:
        s = settings or load_settings()
        return cls(s.flag_expiring_days, s.flag_used_days, s.flag_flapping_writes)


(_TOOL_NAME, _TOOL) = next((n, t) for n, t in WRITING_TOOLS.items() if t.root == "clientes")
assert _TOOL.key_format.endswith("{}") and _TOOL.key_format.count("{}") == 1
# The document a writing call wrote, in SQL (`pref-` || tipo).
CALL_KEY = "%(key_prefix)s || (t.args ->> %(key_arg)s)"

DOCS_ALL = r"""
docs AS MATERIALIZED (
    SELECT s.prefix, s.key, split_part(s.prefix, '.', 2) AS cliente_id, {columns}
    FROM store s
    WHERE s.prefix LIKE 'clientes.%%' AND (s.expires_at IS NULL OR s.expires_at > now())
)"""
DOCS_SCOPED = r""",
docs AS MATERIALIZED (
    SELECT s.prefix, s.key, p.cliente_id, {columns}
    FROM mine_prefixes p JOIN store s ON s.prefix = p.prefix
    WHERE s.expires_at IS NULL OR s.expires_at > now()
)"""
DOC_COLUMNS = """coalesce(s.value ->> 'tipo', CASE WHEN s.key LIKE 'pref-%%' THEN substr(s.key, 6) END) AS tipo,
           coalesce(s.value ->> 'valor', s.value ->> 'texto', s.value::text) AS valor,
           CASE WHEN jsonb_typeof(s.value -> 'hilo') = 'string' THEN s.value ->> 'hilo' END AS hilo, s.expires_at"""
# The writing calls of the window: every one, attributed where a source says whose it is (checkpoint metadata, our
# conversation log, a document's `hilo`), or, for a scope, those of the scope's customers, each source by its index.
WINDOW = "t.tool = %(tool)s AND t.ts >= now() - %(window)s::interval AND t.args ->> %(key_arg)s IS NOT NULL"
CALLS = {
    "all": f"""
    SELECT coalesce(t.cliente_id, cv.subject_id, h.cliente_id) AS cliente_id, {CALL_KEY} AS key
    FROM core_tool_calls t
    LEFT JOIN core_conversations cv ON cv.thread_id = t.thread_id AND cv.subject_root = 'clientes'
    LEFT JOIN hilos h ON h.thread_id = t.thread_id
    WHERE {WINDOW}""",
    # each of the scope's customers by the indexes on core_tool_calls (cliente_id) and core_conversations (subject)
    "scoped": f"""
    SELECT t.cliente_id, {CALL_KEY} AS key FROM mine m
    CROSS JOIN LATERAL (SELECT * FROM core_tool_calls x WHERE x.cliente_id = m.cliente_id OFFSET 0) t
    WHERE {WINDOW}
    UNION ALL
    SELECT cv.subject_id, {CALL_KEY} FROM mine m
    CROSS JOIN LATERAL (SELECT * FROM core_conversations x
                        WHERE x.subject_root = 'clientes' AND x.subject_id = m.cliente_id OFFSET 0) cv
    JOIN core_tool_calls t ON t.thread_id = cv.thread_id AND t.cliente_id IS NULL AND {WINDOW}
    UNION ALL
    SELECT h.cliente_id, {CALL_KEY} FROM hilos h JOIN core_tool_calls t ON t.thread_id = h.thread_id
    WHERE t.cliente_id IS NULL AND {WINDOW}
      AND NOT EXISTS (SELECT 1 FROM core_conversations cv
                      WHERE cv.thread_id = t.thread_id AND cv.subject_root = 'clientes')""",
}
# Our write log of the window, and each document's last logged writer, for the customers in question.
LOG_FROM = {
    "all": "core_memory_writes w WHERE w.prefix LIKE 'clientes.%%' AND",
    # one index lookup per namespace (OFFSET 0: a hash join would read the whole log)
    "scoped": "mine_prefixes p CROSS JOIN LATERAL (SELECT * FROM core_memory_writes x WHERE x.prefix = p.prefix "
    "OFFSET 0) w WHERE",
}
UNATTRIBUTED = {"all": "(SELECT count(*) FROM calls WHERE cliente_id IS NULL)", "scoped": "NULL::bigint"}

FLAGGED = """,
soon AS MATERIALIZED (
    SELECT * FROM docs WHERE expires_at <= now() + make_interval(days => %(expiring_days)s)
), expiring AS (
    SELECT 'expiring'::text AS flag, d.cliente_id, d.prefix, d.key, d.tipo, d.valor AS value, d.expires_at,
           u.last_used, NULL::bigint AS writes, NULL::text AS thread_id, NULL::text AS detail, NULL::text[] AS others
    FROM soon d
    CROSS JOIN LATERAL (SELECT greatest(
        (SELECT max(l.last_human_at) FROM core_thread_last l WHERE l.cliente_id = d.cliente_id),
        (SELECT max(c.last_turn_at) FROM core_conversations c
         WHERE c.subject_root = 'clientes' AND c.subject_id = d.cliente_id),
        (SELECT l.last_human_at FROM core_thread_last l WHERE l.thread_id = d.hilo)) AS last_used OFFSET 0) u
    WHERE u.last_used >= now() - make_interval(days => %(used_days)s)
), hilos AS MATERIALIZED (
    SELECT DISTINCT ON (hilo) hilo AS thread_id, cliente_id FROM docs WHERE hilo IS NOT NULL ORDER BY hilo, cliente_id
), calls AS MATERIALIZED ({calls}
), window_writes AS (
    SELECT 'clientes.' || c.cliente_id AS prefix, c.key, count(*) AS n FROM calls c
    WHERE c.cliente_id IS NOT NULL GROUP BY 1, 2
    UNION ALL
    SELECT w.prefix, w.key, count(*) FROM {log_from} w.written_at >= now() - %(window)s::interval GROUP BY 1, 2
), flapping AS (
    SELECT 'flapping'::text, split_part(x.prefix, '.', 2), x.prefix, x.key, d.tipo, d.valor, d.expires_at,
           NULL::timestamptz, x.n, NULL::text, NULL::text, NULL::text[]
    FROM (SELECT prefix, key, max(n) AS n FROM window_writes GROUP BY 1, 2) x
    LEFT JOIN docs d ON d.prefix = x.prefix AND d.key = x.key
    WHERE x.n > %(flapping_writes)s
), contradiction AS (
    SELECT 'contradiction'::text, d.cliente_id, 'clientes.' || d.cliente_id, min(d.key), d.tipo, NULL::text,
           min(d.expires_at), NULL::timestamptz, count(*), NULL::text, NULL::text,
           array_agg(d.prefix || ' / ' || d.key || ': ' || d.valor ORDER BY d.prefix, d.key)
    FROM docs d WHERE d.tipo IS NOT NULL
    GROUP BY d.cliente_id, d.tipo HAVING count(DISTINCT d.valor) > 1
), last_log AS MATERIALIZED (
    SELECT DISTINCT ON (w.prefix, w.key) w.prefix, w.key, w.thread_id FROM {log_from} w.thread_id IS NOT NULL
    ORDER BY w.prefix, w.key, w.written_at DESC, w.id DESC
), writers AS MATERIALIZED (
    SELECT d.cliente_id, d.prefix, d.key, d.tipo, d.valor, d.expires_at, coalesce(d.hilo, l.thread_id) AS writer
    FROM docs d LEFT JOIN last_log l ON l.prefix = d.prefix AND l.key = d.key
), writer_threads AS MATERIALIZED (
    SELECT x.writer, EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = x.writer) AS held
    FROM (SELECT DISTINCT writer FROM writers WHERE writer IS NOT NULL) x
), written_steps AS MATERIALIZED (
    -- of a held writing thread, whether any checkpoint holding a call that wrote the document is still there
    SELECT t.thread_id, """
FLAGGED_2 = """ AS key,
           bool_or(EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = t.thread_id
                           AND c.checkpoint_ns = t.checkpoint_ns AND c.checkpoint_id = t.checkpoint_id)) AS held
    FROM writer_threads wt JOIN core_tool_calls t ON t.thread_id = wt.writer
    WHERE wt.held AND t.tool = %(tool)s AND t.args ->> %(key_arg)s IS NOT NULL
    GROUP BY 1, 2
), provenance_gone AS (
    SELECT 'provenance_gone'::text, w.cliente_id, w.prefix, w.key, w.tipo, w.valor, w.expires_at, NULL::timestamptz,
           NULL::bigint, w.writer, g.gone, NULL::text[]
    FROM writers w JOIN writer_threads wt ON wt.writer = w.writer
    LEFT JOIN written_steps s ON s.thread_id = w.writer AND s.key = w.key
    CROSS JOIN LATERAL (
        SELECT CASE WHEN NOT wt.held THEN 'thread_gone' WHEN NOT s.held THEN 'step_pruned' END AS gone) g
    WHERE g.gone IS NOT NULL
), flagged AS MATERIALIZED (
    SELECT * FROM expiring UNION ALL SELECT * FROM flapping UNION ALL SELECT * FROM contradiction
    UNION ALL SELECT * FROM provenance_gone
), stores AS (
    SELECT DISTINCT m.cliente_id, m.tienda FROM core_customer_stores m
    WHERE m.effective AND m.cliente_id IN (SELECT cliente_id FROM flagged) {scope_stores}
), counted AS (
    SELECT f.flag, coalesce(s.tienda, '') AS tienda, count(*) AS documents, count(DISTINCT f.cliente_id) AS customers
    FROM flagged f {store_join} stores s ON s.cliente_id = f.cliente_id
    GROUP BY 1, 2
), listed AS (
    SELECT f.*, row_number() OVER (PARTITION BY f.flag ORDER BY f.cliente_id, f.prefix, f.key, f.tipo) AS rn
    FROM flagged f
)
SELECT (SELECT coalesce(jsonb_agg(c ORDER BY c.flag, c.tienda), '[]') FROM counted c) AS counts,
       (SELECT coalesce(jsonb_agg(l ORDER BY l.flag, l.rn), '[]') FROM listed l WHERE l.rn <= %(rows)s) AS rows,
       {unattributed} AS unattributed_writes,
       now() AS read_at"""


def _statement(scoped: bool, large: bool = False) -> str:
    """The statement of every customer, or of a scope's (its namespaces by one lookup per customer, or, `large`, by
    the hash join customer_stores makes for many customers)."""
    kind = "scoped" if scoped else "all"
    mine = (MINE_PREFIXES_LARGE if large else MINE_PREFIXES) if scoped else ""
    docs = mine + (DOCS_SCOPED if scoped else DOCS_ALL).format(columns=DOC_COLUMNS)
    body = (FLAGGED + CALL_KEY + FLAGGED_2).format(
        calls=CALLS[kind],
        log_from=LOG_FROM[kind],
        unattributed=UNATTRIBUTED[kind],
        # a manager counts their stores only; the unscoped read names customers of no store too
        scope_stores="AND m.tienda = ANY(%(stores)s::text[])" if scoped else "",
        store_join="JOIN" if scoped else "LEFT JOIN",
    )
    return "WITH " + docs + body


STATEMENTS = {"all": _statement(False), "scoped": _statement(True), "scoped_large": _statement(True, large=True)}

# --- the dashboard's database apart (issue 52): the tool calls, their rollups, the mirrors of our logs and the shadow
# of the checkpoints' keys are in ours, the documents in the agents' `store`, the customers' stores in ours too. The
# visible documents in question (every customer's, or the scope's namespaces') are streamed, and the mapping's rows
# copied, into temporary tables of ours (never one in the agents' database), and the same statement runs there, the
# checkpoints' keys read from the follower's shadow (the same keys, kept exactly).
DOCS_OF = {
    "all": f"SELECT s.prefix, s.key, split_part(s.prefix, '.', 2) AS cliente_id, {DOC_COLUMNS} FROM store s"
    " WHERE s.prefix LIKE 'clientes.%' AND (s.expires_at IS NULL OR s.expires_at > now())",
    "scoped": f"SELECT s.prefix, s.key, split_part(s.prefix, '.', 2) AS cliente_id, {DOC_COLUMNS}"
    " FROM unnest({prefixes}::text[]) AS p(prefix) JOIN store s ON s.prefix = p.prefix"
    " WHERE s.expires_at IS NULL OR s.expires_at > now()",
}
MAPPING_OF = {
    "all": "SELECT DISTINCT cliente_id, tienda, true AS effective FROM core_customer_stores WHERE effective",
    "scoped": "SELECT DISTINCT cliente_id, tienda, true AS effective FROM core_customer_stores"
    " WHERE effective AND tienda = ANY({stores}::text[])",
}
CREATE_TEMPS = (
    "CREATE TEMP TABLE flag_docs (prefix text, key text, cliente_id text, tipo text, valor text, hilo text,"
    " expires_at timestamptz) ON COMMIT DROP",
    "CREATE TEMP TABLE flag_stores (cliente_id text, tienda text, effective boolean) ON COMMIT DROP",
)
SCOPE_IN_OURS = (
    "mine AS MATERIALIZED (SELECT DISTINCT unnest(%(ids)s::text[]) AS cliente_id), "
    "mine_prefixes AS MATERIALIZED (SELECT DISTINCT unnest(%(prefixes)s::text[]) AS prefix)"
)


def _statement_apart(scoped: bool) -> str:
    body = _statement(scoped).removeprefix("WITH ")
    docs = (MINE_PREFIXES + DOCS_SCOPED.format(columns=DOC_COLUMNS)) if scoped else DOCS_ALL.format(columns=DOC_COLUMNS)
    assert body.startswith(docs), "the documents' CTE must come first"
    head = (SCOPE_IN_OURS + ", " if scoped else "") + "docs AS MATERIALIZED (SELECT * FROM flag_docs)"
    apart = "WITH " + head + body[len(docs) :]
    apart = apart.replace("FROM checkpoints c", "FROM core_checkpoint_shadow c")
    apart = apart.replace("FROM core_customer_stores m", "FROM flag_stores m")
    assert "store s" not in apart and "checkpoints c " not in apart and "core_customer_stores" not in apart
    return apart


STATEMENTS_APART = {"all": _statement_apart(False), "scoped": _statement_apart(True)}


def _apart(db: Database, params: dict[str, Any], scope: Scope | None) -> Any:
    """memory_flags' figures with the dashboard's database apart: the documents and the mapping streamed into ours,
    the statement run there."""
    from psycopg import sql

    kind = "all" if scope is None else "scoped"
    if scope is not None:
        mine = scope_prefixes(db, scope)
        params |= {"ids": sorted({r["cliente_id"] for r in mine}), "prefixes": [r["prefix"] for r in mine]}
    docs = sql.SQL(DOCS_OF[kind]).format(prefixes=sql.Literal(params.get("prefixes", [])))
    mapping = sql.SQL(MAPPING_OF[kind]).format(stores=sql.Literal(params.get("stores", [])))
    with db.ours.connection() as ours, ours.transaction(), db.connection(read_only=True) as agents:
        for statement in CREATE_TEMPS:
            ours.execute(statement)
        out = sql.SQL("COPY ({}) TO STDOUT (FORMAT binary)").format(docs)
        with agents.cursor().copy(out) as reader, ours.cursor().copy("COPY flag_docs FROM STDIN (FORMAT binary)") as w:
            for chunk in reader:
                w.write(chunk)
        ours.execute(sql.SQL("INSERT INTO flag_stores {}").format(mapping))  # the mapping is ours (cluster G)
        ours.execute("ANALYZE flag_docs")
        return one(ours.execute(STATEMENTS_APART[kind], params).fetchone())


COUNT_COLUMNS = ["flag", "tienda", "documents", "customers"]
ROW_COLUMNS = [
    "flag",
    "cliente_id",
    "prefix",
    "key",
    "tipo",
    "value",
    "expires_at",
    "last_used",
    "writes",
    "thread_id",
    "detail",
    "others",
]


@dataclass(frozen=True)
class MemoryFlags:
    """`counts`: flagged documents (and customers) per flag and store; `rows`: up to ROWS_PER_FLAG flagged documents
    per flag; `unattributed_writes`: writing calls of the last 7 days no source attributes to a customer (not counted
    by `flapping`; None in a store manager's read, which reads only their customers' calls)."""

    thresholds: Thresholds
    counts: pd.DataFrame
    rows: pd.DataFrame
    unattributed_writes: int | None  # None: not counted (a store manager's read)
    read_at: Any

    def total(self, flag: str) -> int:
        return int(self.counts.loc[self.counts["flag"] == flag, "documents"].sum())

    def count(self, flag: str, tienda: str) -> int:
        found = self.counts[(self.counts["flag"] == flag) & (self.counts["tienda"] == tienda)]
        return int(found["documents"].sum())


def memory_flags(
    db: Database, thresholds: Thresholds | None = None, scope: Scope | None = None, rows: int = ROWS_PER_FLAG
) -> MemoryFlags:
    """The four flags (module docstring) of every customer, or (`scope`) of a store manager's stores' customers."""
    thresholds = thresholds or Thresholds.from_settings()
    params: dict[str, Any] = {
        "expiring_days": thresholds.expiring_days,
        "used_days": thresholds.used_days,
        "flapping_writes": thresholds.flapping_writes,
        "window": FLAPPING_WINDOW,
        "tool": _TOOL_NAME,
        "key_arg": _TOOL.key_arg,
        "key_prefix": _TOOL.key_format.removesuffix("{}"),
        "rows": rows,
    }
    if scope is not None:
        params |= scope.params()
    if db.ours is not db:
        found = _apart(db, params, scope)
    else:
        kind = "all" if scope is None else "scoped_large" if customer_stores.large_scope(db, scope) else "scoped"
        found = one(db.fetch_one(STATEMENTS[kind], params))
    counts = pd.DataFrame(found["counts"], columns=COUNT_COLUMNS)
    listed = pd.DataFrame(found["rows"], columns=ROW_COLUMNS)
    for column in ("expires_at", "last_used"):
        listed[column] = pd.to_datetime(listed[column], utc=True, format="ISO8601")
    unattributed = found["unattributed_writes"]
    return MemoryFlags(
        thresholds, counts, listed, None if unattributed is None else int(unattributed), found["read_at"]
    )
