"""The evidence of an erasure: the zero-count queries (run as literal SQL, parameters bound client-side by
psycopg, so the register keeps exactly the text that ran and its result), our own `core_*` tables that can
name a customer (found by their columns), and the dry run (`preview`) the DPO sees before erasing.
The erasure itself is core/privacy/erasure.py; re-checks and the register reads core/privacy/erasure_register.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import DictRow

from agent_memory_runtime import clock
from core.agent_server import aegra
from core.agents.retail import METADATA_KEY
from core.capture.status import sync as capture_sync
from core.db import Database, one
from core.ids import CustomerId
from core.privacy import ours as ours_db
from core.privacy import residue as res
from core.privacy import subjects as subj
from core.privacy import term_hashes

log = logging.getLogger(__name__)

ROOT = "clientes"
CLIENTE_KEY = METADATA_KEY[ROOT]  # "cliente_id": what run_turn puts in checkpoint metadata

# Tables erasure must never delete from: the proofs (both registers, the log of who looked at a customer's data, their
# hash chain, its redaction records and retention cuts: they name the subject by id, and digests, not data; the one
# free text, a view's typed purpose, is redacted: VIEW_PURPOSES) and the migrations bookkeeping.
PROTECTED_TABLES = frozenset(
    {
        "core_erasure_register",
        "core_erasure_rechecks",
        "core_access_register",
        "core_data_views",
        "core_register_chain",
        "core_register_redactions",
        "core_register_cuts",
        "core_schema_migrations",
        "core_thread_tombstones",
    }
)
# The one value a protected table may hold about the customer: the purpose typed when viewing their data, or any
# purpose naming their id (free text). Not deleted: redacted, each row's redaction recorded so the 'views' chain
# still verifies (migrations 088, 136).
VIEW_PURPOSES = "core_data_views.purpose"
VIEW_PURPOSES_COUNT_SQL = (
    "SELECT count(*) AS n FROM core_data_views v "
    "WHERE (v.customer_id = %(cliente_id)s OR (v.kind = 'thread' AND v.target = ANY(%(threads)s)) "
    "OR core_purpose_names(v.purpose, %(cliente_id)s)) "
    "AND v.purpose IS NOT NULL AND NOT EXISTS (SELECT 1 FROM core_register_redactions r "
    "WHERE r.table_name = 'core_data_views' AND r.row_id = v.id)"
)
VIEW_PURPOSES_REDACT_SQL = "SELECT core_redact_view_purposes(%(cliente_id)s, %(threads)s, %(request_id)s)"
# Our bookkeeping that names a thread is not customer data: its row is kept and the thread id rewritten. The
# extraction watermark (core.history.tool_calls) moves to just before the erased checkpoint's time: the next
# extraction re-reads the checkpoints of that instant (idempotent), never the whole history again.
REWRITTEN_TABLES = {
    "core_extract_watermark": "UPDATE core_extract_watermark SET thread_id = '', checkpoint_ns = '', "
    "checkpoint_id = '' WHERE thread_id::text = ANY(%(threads)s)",
}
# Tables kept from `store` and `checkpoints` by the change follower (documents per prefix, holders of each value, what
# each document and checkpoint contributed: core/capture) and by triggers on core_tool_calls /
# core_thread_days (the Preferences page's rollups, migration 047): counted in the evidence (they name the
# prefix, the customer or the thread, so they must reach 0 too) but never deleted from directly, which would
# break their counts; deleting the customer's rows of the base tables empties them.
DERIVED_TABLES = frozenset(
    {
        "core_prefix_counts",
        "core_value_holders",
        "core_store_shadow",
        "core_checkpoint_shadow",
        "core_tool_call_subject_days",
        "core_tool_call_thread_days",
        "core_thread_last",
    }
)

# --- evidence queries (the seed's two, corrected for nested namespaces, plus the checkpoint tables)

STORE_ZERO_SQL = r"SELECT count(*) AS n FROM store WHERE prefix = %(prefix)s OR prefix LIKE %(pattern)s ESCAPE '\'"
VECTORS_ZERO_SQL = (
    r"SELECT count(*) AS n FROM store_vectors WHERE prefix = %(prefix)s OR prefix LIKE %(pattern)s ESCAPE '\'"
)
CHECKPOINTS_ZERO_SQL = (
    "SELECT count(*) AS n FROM checkpoints "
    "WHERE thread_id = ANY(%(threads)s) OR metadata->>'" + CLIENTE_KEY + "' = %(cliente_id)s"
)
# With the configured metadata keys (default cliente_id, customer_id, user_id) in place of cliente_id.
CHECKPOINTS_ZERO_KEYS_SQL = "SELECT count(*) AS n FROM checkpoints WHERE thread_id = ANY(%(threads)s) OR {keys}"
# The residue evidence: the raw-bytes scan (raw_scan) over every thread but those the DPO left, with the
# distinctive terms read before the erasure, then res.RESIDUE_THREADS_SQL gives the decoder-confirmed threads (and
# term_hashes those holding a value earlier requests erased); its result is how many threads.
RESIDUE_TABLE = "residue"
ERASED_KIND = "erased"  # a residue match of a value an earlier request erased (known by its hash only)
CHECKPOINT_BLOBS_ZERO_SQL = "SELECT count(*) AS n FROM checkpoint_blobs WHERE thread_id = ANY(%(threads)s)"
CHECKPOINT_WRITES_ZERO_SQL = "SELECT count(*) AS n FROM checkpoint_writes WHERE thread_id = ANY(%(threads)s)"
STORE_TABLES = ("store", "store_vectors")  # the two queries the DPO shows verbatim
# ... and, on a deployment served by Aegra, the queries over its own tables (server_targets), shown beside them
SERVER_TABLE_PREFIX = aegra.NAME.lower() + "."
FIXED_QUERIES: dict[str, str] = {
    "store": STORE_ZERO_SQL,
    "store_vectors": VECTORS_ZERO_SQL,
    "checkpoints": CHECKPOINTS_ZERO_SQL,
    "checkpoint_blobs": CHECKPOINT_BLOBS_ZERO_SQL,
    "checkpoint_writes": CHECKPOINT_WRITES_ZERO_SQL,
}

SELECT_NAMESPACES = r"""
SELECT prefix, count(*) AS documents FROM store
WHERE prefix = %(prefix)s OR prefix LIKE %(pattern)s ESCAPE '\'
GROUP BY prefix ORDER BY prefix"""
# Our tables that may name a customer, found by their columns (so a table added later is covered).
# pg_catalog rather than information_schema: this runs at every erasure and every re-check.
CUSTOMER_COLUMNS = ("prefix", "thread_id", "subject_root", "subject_id", "cliente_id", "customer_id")
# JSON arrays in our tables whose elements can name a customer: (table, column, element condition
# on `elem`). Matching elements are removed, the row (an operations record) stays.
JSON_ARRAY_COLUMNS: tuple[tuple[str, str, str], ...] = (
    (
        "core_degradation_episodes",
        "denials",  # [{tool, risk, thread_id, customer_id, denied_at}]
        "elem->>'customer_id' = %(cliente_id)s OR elem->>'thread_id' = ANY(%(threads)s)",
    ),
    ("core_sweep_log", "threads_sample", "elem #>> '{}' = ANY(%(threads)s)"),  # ["thread id", ...]
)
# Rows naming the customer in a key written as text: the change follower's dead letters (core/capture) name the rows
# they could not apply in `row_key` ("prefix / key", "thread / ns / checkpoint", joined by " | ") and the aggregates
# left unknown in `unknown` ("what: prefix, customer or thread"). Deleted with the customer's other rows.
KEYED_TEXT_COLUMNS: dict[str, str] = {
    "core_capture_dead_letters.row_key": (
        "EXISTS (SELECT 1 FROM (SELECT split_part(k, ' / ', 1) FROM unnest(string_to_array(row_key, ' | ')) AS k "
        "UNION ALL SELECT split_part(substr(u, strpos(u, ': ') + 2), ' / ', 1) FROM unnest(unknown) AS u) AS n(head) "
        r"WHERE n.head = %(prefix)s OR n.head LIKE %(pattern)s ESCAPE '\' OR n.head = ANY(%(threads)s) "
        "OR n.head = %(cliente_id)s)"
    ),
}
# In the dashboard's own database apart (PG_DASHBOARD), a table of the same name in the agents' database is the copy
# left there from before the move (issue 52): counted (and erased) under this prefix, so that "complete" means both.
AGENTS_COPY = "agents:"
SELECT_OWN_COLUMNS = r"""
SELECT c.relname::text AS table_name, a.attname::text AS column_name, format_type(a.atttypid, a.atttypmod) AS type
FROM pg_class c
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
  AND c.relname LIKE 'core\_%%' AND (a.attname = ANY(%(columns)s) OR c.relname || '.' || a.attname = ANY(%(json)s))
ORDER BY 1, 2"""
# Tables named in the design whose absence is normal (created by other modules' migrations).
OPTIONAL_TABLES = ("core_guard_denials",)
SELECT_REGCLASS = "SELECT to_regclass(%s) IS NOT NULL AS present"


@dataclass(frozen=True)
class EvidenceQuery:
    """One zero-count query exactly as it ran, its result and when (ISO 8601, UTC)."""

    table: str
    sql: str
    result: int
    at: str


@dataclass(frozen=True)
class Preview:
    """What an erasure of `customer_id` would delete now (dry run)."""

    customer_id: CustomerId
    namespace_prefix: str
    counts: dict[str, int]
    namespaces: list[tuple[str, int]]
    thread_ids: list[str]
    subjects: subj.Subjects | None = None  # which source found which thread
    residue: res.Residue | None = None  # unattributed threads holding the customer's id or values

    @property
    def held_threads(self) -> list[str]:
        """The attributed threads the checkpoint tables hold now (what every page counts as the customer's
        threads; `thread_ids` also names erased or expired ones, which the erasure still looks for)."""
        return self.subjects.held if self.subjects else []

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def residue_threads(self) -> list[str]:
        return self.residue.proposed if self.residue else []


# --- helpers -----------------------------------------------------------------------------------


def escape_like(text: str) -> str:
    """`text` as a literal inside a LIKE pattern with ESCAPE '\\'."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def evidence_params(customer_id: str, thread_ids: Iterable[str], server_runs: Iterable[str] = ()) -> dict[str, Any]:
    """`server_runs`: the agent server's run ids captured before the erasure deleted them (aegra.run_ids)."""
    prefix = f"{ROOT}.{customer_id}"
    return {
        "prefix": prefix,
        "pattern": escape_like(prefix) + ".%",
        "cliente_id": customer_id,
        "root": ROOT,
        "threads": sorted(set(thread_ids)),
        "server_runs": sorted(set(server_runs)),
    }


def now_iso() -> str:
    """Now (the clock records carry: real, or the demo's replayed time), ISO 8601 to the millisecond."""
    return clock.now().isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class OwnTarget:
    """Rows (or JSON array elements) of one of our tables that name the customer."""

    name: str  # table, or table.column for JSON array elements
    count_sql: str
    # DELETE, or an UPDATE scrubbing or rewriting; None: derived from `store`, emptied by its triggers
    erase_sql: str | None
    # where it runs: our database (True) or the agents' (False); the same one unless PG_DASHBOARD is set apart
    ours: bool = True


def _row_target(table: str, condition: str) -> OwnTarget:
    ident, cond = sql.Identifier(table), sql.SQL(condition)
    return OwnTarget(
        table,
        sql.SQL("SELECT count(*) AS n FROM {} WHERE {}").format(ident, cond).as_string(),
        sql.SQL("DELETE FROM {} WHERE {}").format(ident, cond).as_string(),
    )


def _json_array_target(table: str, column: str, condition: str) -> OwnTarget:
    fmt = {"t": sql.Identifier(table), "c": sql.Identifier(column), "cond": sql.SQL(condition)}
    elements = "jsonb_array_elements(CASE WHEN jsonb_typeof({c}) = 'array' THEN {c} ELSE '[]'::jsonb END)"
    count = sql.SQL("SELECT count(*) AS n FROM {t}, " + elements + " AS x(elem) WHERE COALESCE({cond}, false)")
    erase = sql.SQL(
        "UPDATE {t} SET {c} = COALESCE((SELECT jsonb_agg(x.elem ORDER BY x.ord) FROM jsonb_array_elements({c}) "
        "WITH ORDINALITY AS x(elem, ord) WHERE NOT COALESCE({cond}, false)), '[]'::jsonb) "
        "WHERE jsonb_typeof({c}) = 'array' AND EXISTS (SELECT 1 FROM jsonb_array_elements({c}) AS x(elem) "
        "WHERE COALESCE({cond}, false))"
    )
    return OwnTarget(f"{table}.{column}", count.format(**fmt).as_string(), erase.format(**fmt).as_string())


def _table_targets(
    conn: psycopg.Connection[DictRow], *, ours: bool, purposes: bool, copies: frozenset[str] = frozenset()
) -> tuple[list[OwnTarget], set[str]]:
    """The targets of one database's `core_*` tables (every table but PROTECTED_TABLES), and every `core_*` table
    name it has with a column erasure looks at; `purposes`: with the views log's typed purposes (where it lives);
    `copies`: tables kept in the other database now, whose copy here nothing maintains any more (a derived one's rows
    are deleted like any other's: no follower empties them)."""
    json_names = {f"{t}.{c}": (t, c, cond) for t, c, cond in JSON_ARRAY_COLUMNS}
    special = list(json_names) + list(KEYED_TEXT_COLUMNS)
    columns_of: dict[str, set[str]] = {}
    json_found: list[tuple[str, str, str]] = []
    keyed_found: list[str] = []
    rows = conn.execute(SELECT_OWN_COLUMNS, {"columns": list(CUSTOMER_COLUMNS), "json": special}).fetchall()
    for row in rows:
        table, column = row["table_name"], row["column_name"]
        if f"{table}.{column}" in json_names and row["type"] == "jsonb":
            json_found.append(json_names[f"{table}.{column}"])
        if f"{table}.{column}" in KEYED_TEXT_COLUMNS:
            keyed_found.append(f"{table}.{column}")
        if column in CUSTOMER_COLUMNS:
            columns_of.setdefault(table, set()).add(column)
    targets: list[OwnTarget] = []
    for table, columns in columns_of.items():
        if table in PROTECTED_TABLES:
            continue
        parts = []
        if "prefix" in columns:
            parts.append(r"(prefix::text = %(prefix)s OR prefix::text LIKE %(pattern)s ESCAPE '\')")
        if "thread_id" in columns:
            parts.append("thread_id::text = ANY(%(threads)s)")
        if {"subject_root", "subject_id"} <= columns:
            parts.append("(subject_root::text = %(root)s AND subject_id::text = %(cliente_id)s)")
        for column in ("cliente_id", "customer_id"):
            if column in columns:
                parts.append(f"{column}::text = %(cliente_id)s")
        if parts:
            target = _row_target(table, " OR ".join(parts))
            if table in DERIVED_TABLES and table not in copies:
                target = OwnTarget(table, target.count_sql, None)
            elif table in REWRITTEN_TABLES:
                target = OwnTarget(table, target.count_sql, REWRITTEN_TABLES[table])
            targets.append(target)
    targets += [_row_target(name.split(".", 1)[0], KEYED_TEXT_COLUMNS[name]) for name in keyed_found]
    targets += [_json_array_target(*found) for found in json_found]
    if purposes and "core_data_views" in columns_of:
        targets.append(OwnTarget(VIEW_PURPOSES, VIEW_PURPOSES_COUNT_SQL, VIEW_PURPOSES_REDACT_SQL))
    tables = set(columns_of) | {name.split(".", 1)[0] for name in keyed_found}
    return [OwnTarget(t.name, t.count_sql, t.erase_sql, ours) for t in targets], tables


def own_targets(conn: psycopg.Connection[DictRow], ours: psycopg.Connection[DictRow] | None = None) -> list[OwnTarget]:
    """Every place in our `core_*` tables that can name a customer (never the register itself): rows found by their
    columns, and elements of the known JSON arrays; with the dashboard's database apart (PG_DASHBOARD: `ours`, or
    reached from `conn`), found in both databases, each target naming where it runs (the agents' database's copy of a
    table ours has too is named AGENTS_COPY + its name)."""
    with nullcontext(ours) if ours is not None else ours_db.connect(conn) as mine:
        if not ours_db.is_apart(conn, mine):
            targets, _ = _table_targets(conn, ours=True, purposes=True)
        else:
            here, in_ours = _table_targets(mine, ours=True, purposes=True)
            there, _ = _table_targets(conn, ours=False, purposes=False, copies=frozenset(in_ours))
            there = [
                OwnTarget(AGENTS_COPY + t.name, t.count_sql, t.erase_sql, False)
                if t.name.split(".", 1)[0] in in_ours
                else t
                for t in there
            ]
            targets = there + here
    targets += server_targets(conn)
    names = {t.name for t in targets}
    for optional in OPTIONAL_TABLES:  # present but not understood must be said, not skipped silently
        if optional not in names and one(conn.execute(SELECT_REGCLASS, (optional,)).fetchone())["present"]:
            log.warning(
                "%s exists but has no column erasure knows (prefix, thread_id, subject_id, customer_id)", optional
            )
    return targets


def server_targets(conn: psycopg.Connection[DictRow]) -> list[OwnTarget]:
    """The rows of an Agent Protocol server's own tables about the customer (core.agent_server.aegra), when this
    database holds them: a run's events, its runs (input, config, context, output, error), its thread rows, emptied in
    that order by the erasure. Named `aegra.<table>` in the evidence and the counts."""
    server = aegra.detect_conn(conn)
    if server is None:
        return []
    out = []
    for table, condition in aegra.erasure_conditions(server, CLIENTE_KEY):
        fmt = {"t": sql.Identifier(table), "cond": sql.SQL(condition)}
        out.append(
            OwnTarget(
                SERVER_TABLE_PREFIX + table,
                sql.SQL("SELECT count(*) AS n FROM {t} WHERE {cond}").format(**fmt).as_string(),
                sql.SQL("DELETE FROM {t} WHERE {cond}").format(**fmt).as_string(),
                False,
            )
        )
    return out


def checkpoints_zero_sql(keys: Iterable[str]) -> str:
    """The checkpoints evidence query with the configured metadata keys (or threads only, if none)."""
    # Live, not core_checkpoint_shadow: the DPO's proof reads the agents' table itself (a sequential scan since
    # migration 144 took our indexes off it; BENCHMARKS.md "Change capture").
    conds = [sql.SQL("(metadata ? {k} AND metadata->>{k} = %(cliente_id)s)").format(k=sql.Literal(k)) for k in keys]
    cond = sql.SQL(" OR ").join(conds) if conds else sql.SQL("false")
    return sql.SQL(CHECKPOINTS_ZERO_KEYS_SQL).format(keys=cond).as_string()


def run_evidence_conn(
    conn: psycopg.Connection[DictRow],
    targets: list[OwnTarget],
    customer_id: CustomerId,
    thread_ids: Iterable[str],
    keys: Iterable[str] = (CLIENTE_KEY,),
    residue_terms: list[res.Term] | None = None,
    left: Iterable[str] = (),
    residue_candidates: Iterable[str] | None = None,
    hashed: tuple[Iterable[term_hashes.HashedTerm], str] | None = None,
    server_runs: Iterable[str] = (),
    ours: psycopg.Connection[DictRow] | None = None,
) -> list[EvidenceQuery]:
    """Every zero-count query, made literal (parameters bound by psycopg's client-side quoting) and
    sent in one pipeline: what is recorded is exactly the text that ran. With `residue_terms` and/or `hashed`
    (terms known by their keyed hashes only, with their salt), the residue too: the threads but `left` holding a
    term (the SQL decoder confirms the terms read now, term_hashes the hashed ones; `residue_candidates`: the raw
    scan's threads when a scan of the same terms has just run). The residue's terms are never in its text: they
    are named by reference (our records must not keep what they record the removal of). On a deployment served by
    Aegra the residue reads its rows' text too (aegra.SERVER_RESIDUE), and `server_runs` are the run ids captured
    before the erasure deleted them (their events are counted by them). The seed's two queries and the checkpoint
    tables' run on `conn` (the agents' primary: the proof reads their live tables), each of our targets where it lives
    (`ours`, or our database reached from `conn`, with PG_DASHBOARD apart)."""
    params = evidence_params(customer_id, thread_ids, server_runs)
    queries = dict(FIXED_QUERIES) | {"checkpoints": checkpoints_zero_sql(keys)} | {t.name: t.count_sql for t in targets}
    on_ours = {t.name for t in targets if t.ours}
    binder = psycopg.ClientCursor(conn)
    with nullcontext(ours) if ours is not None or not on_ours else ours_db.connect(conn) as mine:
        mine = mine or conn
        where = {table: mine if table in on_ours else conn for table in queries}
        literal = {
            table: psycopg.ClientCursor(where[table]).mogrify(query, params).strip() for table, query in queries.items()
        }
        cursors = {}
        for side in dict.fromkeys(where.values()):  # the agents' database first, then ours apart
            with side.pipeline() as pipeline:
                for table, text in literal.items():
                    if where[table] is side:
                        cursors[table] = side.cursor()
                        cursors[table].execute(text)
                        # each count its own transaction: the statements up to a Sync are one implicit transaction,
                        # which would hold the tables already counted while it waits for the next one (the
                        # follower's recount truncates ours in its own order: a deadlock, once in a CI run)
                        pipeline.sync()
        at = now_iso()
        counted = {table: int(one(cur.fetchone())["n"]) for table, cur in cursors.items()}
    out = [EvidenceQuery(table, literal[table], counted[table], at) for table in literal]
    rparams = res.residue_count_params(conn, residue_terms or (), left, residue_candidates)
    hashed_terms, salt = ([t for t in hashed[0] if not t.common], hashed[1]) if hashed else ([], "")
    if rparams["raws"] or hashed_terms:
        found: set[str] = set()
        texts = []
        if rparams["raws"]:
            found |= {r["thread_id"] for r in conn.execute(binder.mogrify(res.RESIDUE_THREADS_SQL, rparams))}
            texts.append(binder.mogrify(res.residue_threads_shown(len(rparams["raws"])), rparams).strip())
        server = aegra.detect_conn(conn) if rparams["raws"] else None
        if server is not None:  # the agent server's rows of threads not left: run inputs, outputs, metadata, events
            sparams = {k: rparams[k] for k in ("raws", "rxs", "left")}
            found |= {r["thread_id"] for r in conn.execute(binder.mogrify(aegra.residue_threads_sql(server), sparams))}
            shown = res.residue_threads_shown(len(rparams["raws"]), aegra.residue_threads_sql(server))
            texts.append(binder.mogrify(shown, sparams).strip())
        if hashed_terms:
            found |= set(term_hashes.find_threads(conn, hashed_terms, salt, left))
            texts.append(term_hashes.describe(conn, hashed_terms, left))
        out.append(EvidenceQuery(RESIDUE_TABLE, ";\n".join(texts), len(found), now_iso()))
    return out


def with_earlier_terms(
    conn: psycopg.Connection[DictRow], residue: res.Residue, attributed: Iterable[str]
) -> tuple[res.Residue, term_hashes.Earlier, list[term_hashes.HashedTerm], list[term_hashes.HashedTerm]]:
    """The residue of the terms read now, plus the threads holding a value that earlier requests for the customer
    erased (the store no longer holds it; the register keeps it hashed): each such match names the term by its
    reference in the new request, kind `erased`, without a snippet. Returns (residue, the earlier requests' salt and
    terms, the terms read now hashed, the earlier terms carried)."""
    before = term_hashes.earlier(conn, residue.customer_id)
    now, carried = term_hashes.merge(residue.terms, before)
    by_ref = {t.ref: t for t in carried}
    for thread, refs in term_hashes.find_threads(conn, carried, before.salt, attributed).items():
        residue.matches += [
            res.ResidueMatch(thread, ref, ERASED_KIND, by_ref[ref].customers, False, "") for ref in sorted(refs)
        ]
    return residue, before, now, carried


def find_threads_conn(
    conn: psycopg.Connection[DictRow], customer_id: CustomerId, config: subj.Attribution | None = None
) -> list[str]:
    """`find_threads` on an open connection, for an id already parsed."""
    return subj.resolve_conn(conn, customer_id, config or subj.Attribution.from_settings()).thread_ids


def run_evidence(
    db: Database, customer_id: str, thread_ids: Iterable[str], config: subj.Attribution | None = None
) -> list[EvidenceQuery]:
    """Run every zero-count query as literal SQL on the primary; return text, result and time. Raises
    InvalidIdentifier for a bad id (parsed here unless it already is a CustomerId)."""
    customer_id = CustomerId.parse(customer_id)
    with db.connection() as conn:
        return run_evidence_conn(
            conn, own_targets(conn), customer_id, thread_ids, (config or subj.Attribution.from_settings()).metadata_keys
        )


def find_threads(db: Database, customer_id: str, config: subj.Attribution | None = None) -> list[str]:
    """The customer's checkpoint threads, as the subject resolver attributes them (every source). Raises
    InvalidIdentifier for a bad id (parsed here unless it already is a CustomerId)."""
    customer_id = CustomerId.parse(customer_id)
    with db.connection() as conn:
        return find_threads_conn(conn, customer_id, config)


def preview(
    db: Database, customer_id: str, config: subj.Attribution | None = None, count_common: bool = False
) -> Preview:
    """Dry run: rows per table an erasure of `customer_id` would delete now, the attributed threads with their
    sources, and the residue threads the DPO has to decide on; with `count_common`, also the threads each common
    term is in (asked for on the page). Raises InvalidIdentifier for a bad id (parsed here unless it already is a
    CustomerId), before anything is read."""
    customer_id = CustomerId.parse(customer_id)
    config = config or subj.Attribution.from_settings()
    capture_sync(db)  # the aggregates it counts and the residue scan trusts include every write until now
    with db.connection() as conn:
        subjects = subj.resolve_conn(conn, customer_id, config)
        threads = subjects.thread_ids
        counts = {
            e.table: e.result
            for e in run_evidence_conn(conn, own_targets(conn), customer_id, threads, config.metadata_keys)
        }
        namespaces = [
            (r["prefix"], int(r["documents"]))
            for r in conn.execute(SELECT_NAMESPACES, evidence_params(customer_id, ())).fetchall()
        ]
        residue = res.residue_conn(conn, customer_id, subjects.threads, count_common=count_common)
        residue = with_earlier_terms(conn, residue, subjects.threads)[0]
    return Preview(customer_id, f"{ROOT}.{customer_id}", counts, namespaces, threads, subjects, residue)


__all__ = [
    "CLIENTE_KEY",
    "DERIVED_TABLES",
    "EvidenceQuery",
    "OwnTarget",
    "PROTECTED_TABLES",
    "Preview",
    "ROOT",
    "VIEW_PURPOSES",
    "SERVER_TABLE_PREFIX",
    "STORE_TABLES",
    "escape_like",
    "evidence_params",
    "find_threads",
    "find_threads_conn",
    "now_iso",
    "own_targets",
    "preview",
    "run_evidence",
    "run_evidence_conn",
]
