"""Aegra (`aegra-api`, an Agent Protocol server on PostgreSQL): its own tables beside the checkpoint and store tables,
recognized, read and, for an erasure, emptied of one customer (issue 53).

Detection, not configuration: a database is served by Aegra when its migrations' version table (alembic's
`alembic_version`) and the columns Aegra's migrations create are there (`thread.metadata_json`,
`runs.error_message`, ...). Nothing is installed on these tables (no trigger, no index of ours): every read here is
a plain query over them, bounded by LIMITs, on the server's own indexes (`idx_runs_thread_id`, `idx_runs_status`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
import psycopg
from psycopg import sql
from psycopg.rows import DictRow

from core.config import setting
from core.db import Database

NAME = "Aegra"
# Aegra's alembic revisions, oldest first (aegra_api/alembic/versions), and the release whose head we tested.
REVISIONS = ("7b79bfd12626", "5931cd77e93b", "11b2402d4be1", "76dfdbe90d2b", "aee821a02fc8", "d042a0ca1cb5")
TESTED_RELEASES = {"d042a0ca1cb5": "0.6.0"}  # tests/test_aegra.py runs aegra-api 0.6.0, whose head this is
# The columns that make these tables Aegra's (its first migrations), checked before anything is read.
REQUIRED_COLUMNS = {
    "alembic_version": {"version_num"},
    "thread": {"thread_id", "status", "metadata_json", "user_id", "created_at", "updated_at"},
    "runs": {
        "run_id",
        "thread_id",
        "assistant_id",
        "status",
        "input",
        "config",
        "output",
        "error_message",
        "user_id",
        "created_at",
        "updated_at",
    },
    "assistant": {"assistant_id", "name", "graph_id"},
}
ACTIVE_STATUSES = ("pending", "running")  # a run in one of these is being worked on, or should be
# A run pending or running with no update for longer than this is flagged (AGENT_SERVER_STUCK_RUN_S): a server process
# killed mid-run leaves its run `running` for ever (Aegra 0.6.0 has no lease to take it back).
DEFAULT_STUCK_RUN_S = 600.0


def stuck_threshold_s(secrets: Mapping[str, Any] | None = None) -> float:
    """AGENT_SERVER_STUCK_RUN_S (environment, then secrets), seconds > 0. Raises ValueError for anything else."""
    raw = setting("AGENT_SERVER_STUCK_RUN_S", secrets or {}, DEFAULT_STUCK_RUN_S)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"AGENT_SERVER_STUCK_RUN_S must be a number of seconds, got {raw!r}") from None
    if not value > 0 or value == float("inf"):
        raise ValueError(f"AGENT_SERVER_STUCK_RUN_S must be a positive number of seconds, got {raw!r}")
    return value


SELECT_COLUMNS = """
SELECT c.relname::text AS table_name, a.attname::text AS column_name
FROM pg_class c
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p') AND c.relname = ANY(%(tables)s)"""
SELECT_REVISION = "SELECT version_num FROM alembic_version"


@dataclass(frozen=True)
class AgentServer:
    """An Agent Protocol server whose tables this database holds."""

    name: str
    revision: str  # its migrations' version (alembic revision)
    release: str | None  # the release whose head that revision is, when we tested it; None: not known
    known_revision: bool  # one of the revisions its migrations have (an unknown one: a newer release)
    has_context: bool  # runs.context (revision 5931cd77e93b)
    has_run_events: bool


def detect_conn(conn: psycopg.Connection[DictRow]) -> AgentServer | None:
    """The Aegra deployment this database holds, or None (no version table, or not Aegra's columns)."""
    tables = [*REQUIRED_COLUMNS, "run_events"]
    columns: dict[str, set[str]] = {}
    for row in conn.execute(SELECT_COLUMNS, {"tables": tables}).fetchall():
        columns.setdefault(row["table_name"], set()).add(row["column_name"])
    if any(not need <= columns.get(table, set()) for table, need in REQUIRED_COLUMNS.items()):
        return None
    revisions = [r["version_num"] for r in conn.execute(SELECT_REVISION).fetchall()]
    if len(revisions) != 1:  # alembic keeps one row per head: several heads are not a release of Aegra
        return None
    revision = revisions[0]
    return AgentServer(
        NAME,
        revision,
        TESTED_RELEASES.get(revision),
        revision in REVISIONS,
        "context" in columns["runs"],
        "run_id" in columns.get("run_events", set()),
    )


def detect(db: Database) -> AgentServer | None:
    with db.connection(read_only=True) as conn:
        return detect_conn(conn)


# --- attribution: the server's own rows naming a customer by the configured metadata keys ---------------------

# A thread's metadata (given by the application at threads.create), a run's context and its config's configurable
# and metadata (given at runs.create): where an application served by Aegra says whom a conversation is about.
SELECT_THREADS_BY_KEY = """
SELECT thread_id FROM thread WHERE metadata_json ->> {key} = %(id)s
UNION
SELECT thread_id FROM runs
WHERE {context} config -> 'configurable' ->> {key} = %(id)s OR config -> 'metadata' ->> {key} = %(id)s"""


def threads_by_key(conn: psycopg.Connection[DictRow], server: AgentServer, key: str, customer_id: str) -> list[str]:
    context = sql.SQL("context ->> {key} = %(id)s OR" if server.has_context else "")
    query = sql.SQL(SELECT_THREADS_BY_KEY).format(key=sql.Literal(key), context=context.format(key=sql.Literal(key)))
    return [r["thread_id"] for r in conn.execute(query, {"id": customer_id}).fetchall()]


SELECT_SERVER_HELD = "SELECT thread_id FROM thread WHERE thread_id = ANY(%(threads)s)"


def server_held(conn: psycopg.Connection[DictRow], threads: Iterable[str]) -> list[str]:
    """Those of `threads` the server's `thread` table holds now (sorted)."""
    rows = conn.execute(SELECT_SERVER_HELD, {"threads": sorted(set(threads))}).fetchall()
    return sorted(r["thread_id"] for r in rows)


# --- erasure targets: (name, condition) on the evidence parameters (threads, cliente_id) ---------------------------


def erasure_conditions(server: AgentServer, key: str) -> list[tuple[str, str]]:
    """Where the server's tables hold a customer: (table, SQL condition over %(threads)s and %(cliente_id)s), in the
    order they are emptied (a run's events before the run, runs before their thread). `key`: the metadata key
    checked directly, beside the attributed threads (a run naming the customer on a thread nobody attributed)."""
    k = sql.Literal(key).as_string()
    runs = (
        f"thread_id = ANY(%(threads)s) OR config -> 'configurable' ->> {k} = %(cliente_id)s "
        f"OR config -> 'metadata' ->> {k} = %(cliente_id)s"
        + (f" OR context ->> {k} = %(cliente_id)s" if server.has_context else "")
    )
    out = []
    if server.has_run_events:
        # run_events has no thread column and no foreign key (a run deleted, its events stay until Aegra's own hourly
        # cleanup): counted by their own run_id against the run ids captured before any run was deleted
        # (%(server_runs)s, `run_ids`), plus the runs still there; never only through `runs`, which reads 0 by
        # construction once the runs are gone.
        out.append(("run_events", f"run_id = ANY(%(server_runs)s) OR run_id IN (SELECT run_id FROM runs WHERE {runs})"))
    out.append(("runs", runs))
    out.append(("thread", f"thread_id = ANY(%(threads)s) OR metadata_json ->> {k} = %(cliente_id)s"))
    return out


SELECT_RUN_IDS = "SELECT run_id FROM runs WHERE {runs}"


def run_ids(conn: psycopg.Connection[DictRow], server: AgentServer, key: str, params: Mapping[str, Any]) -> set[str]:
    """The ids of the runs an erasure with these evidence parameters (threads, cliente_id) deletes: captured before
    they are deleted, so the run_events query can still count their events afterwards."""
    runs = dict(erasure_conditions(server, key))["runs"]
    return {r["run_id"] for r in conn.execute(SELECT_RUN_IDS.format(runs=runs), params).fetchall()}


# --- the residue: the server's rows of threads nobody attributed, holding the customer's terms ----------------------

# Every text the server keeps, per thread, as JSON text (the form the residue's patterns are written for): a thread's
# metadata, each run's input, config, context, output and error, each run event's data (events joined to their run
# for its thread; an event whose run is gone has no thread: `thread_id` NULL, `source` names the run). The routing
# keys an application puts in a run's context and config ({skip}: the subject keys, which attribution reads, and the
# store keys, CUSTOMER_STORE_KEYS, which name a store, not a customer) are left out: another customer's run served
# by the same store would otherwise hold "T002" as if it were this customer's.
SERVER_TEXTS = """
SELECT thread_id, 'thread' AS source, metadata_json::text AS txt FROM thread
UNION ALL
SELECT thread_id, 'runs ' || run_id,
       concat_ws(' ', input::text, {config}, {configurable}, {config_metadata}, {context}, output::text,
                 to_jsonb(error_message)::text) FROM runs
{events}"""
SERVER_EVENTS = """UNION ALL
SELECT r.thread_id, 'run_events ' || e.run_id, e.data::text FROM run_events e LEFT JOIN runs r ON r.run_id = e.run_id"""
# The threads (but those in %(left)s) whose server rows hold a term as a whole token: the raw text first (strpos),
# then the term's pattern (residue._bounded); one row per (thread, term) with a text that holds it.
SERVER_RESIDUE = """
WITH t AS MATERIALIZED (SELECT raw, rx FROM unnest(%(raws)s::text[], %(rxs)s::text[]) AS u(raw, rx)),
x AS ({texts})
SELECT DISTINCT ON (x.thread_id, t.raw) x.thread_id, t.raw AS term, x.txt FROM x JOIN t
    ON strpos(x.txt, t.raw) > 0 AND x.txt ~ t.rx
WHERE x.thread_id IS NOT NULL AND NOT (x.thread_id = ANY(%(left)s))
ORDER BY x.thread_id, t.raw"""
# The same, as the evidence counts it: how many such threads.
SERVER_RESIDUE_THREADS = "SELECT DISTINCT thread_id FROM ({residue}) s"


def routing_keys() -> list[str]:
    """The keys left out of runs' context and config by the residue (SERVER_TEXTS): SUBJECT_METADATA_KEYS and
    CUSTOMER_STORE_KEYS as configured."""
    from core.config import load_settings

    settings = load_settings()
    return sorted({*settings.subject_metadata_keys, *settings.customer_store_keys})


# a run's config but its configurable and metadata (read apart, without the routing keys)
CONFIG_REST = (
    "(CASE WHEN jsonb_typeof(config) = 'object' THEN config - 'configurable' - 'metadata' ELSE config END)::text"
)


def server_texts_sql(server: AgentServer, skip: Iterable[str] | None = None) -> str:
    """SERVER_TEXTS over this server's columns, `skip` (default: routing_keys()) inlined as a literal."""
    keys = sql.Literal(sorted(set(routing_keys() if skip is None else skip))).as_string()

    def without_keys(value: str) -> str:  # an object loses the keys; anything else is read as it is
        return f"(CASE WHEN jsonb_typeof({value}) = 'object' THEN {value} - {keys}::text[] ELSE {value} END)::text"

    return SERVER_TEXTS.format(
        config=CONFIG_REST,
        configurable=without_keys("(config -> 'configurable')"),
        config_metadata=without_keys("(config -> 'metadata')"),
        context=without_keys("context") if server.has_context else "NULL",
        events=SERVER_EVENTS if server.has_run_events else "",
    )


def residue_sql(server: AgentServer) -> str:
    """SERVER_RESIDUE over this server's columns (parameters: raws, rxs, left)."""
    return SERVER_RESIDUE.format(texts=server_texts_sql(server))


def residue_threads_sql(server: AgentServer) -> str:
    return SERVER_RESIDUE_THREADS.format(residue=residue_sql(server))


def residue_rows(
    conn: psycopg.Connection[DictRow], server: AgentServer, raws: list[str], rxs: list[str], left: Iterable[str]
) -> list[DictRow]:
    """(thread_id, term, txt) for each thread but `left` whose server rows hold a term (raws[i] matched by rxs[i])."""
    if not raws:
        return []
    return conn.execute(residue_sql(server), {"raws": raws, "rxs": rxs, "left": sorted(set(left))}).fetchall()


# --- the Checkpoints page: threads as the server sees them, their runs, runs nobody finishes ------------------------

# Each thread the server or the checkpoints know, with the server's status and its runs, and whether both agree
# (`both`), the server has a row the checkpoints do not (`server_only`: a failed first run, or checkpoints deleted
# behind its back) or the reverse (`checkpoints_only`: a server row deleted, or a thread written by another process).
SELECT_THREADS = """
WITH cp AS (SELECT thread_id, count(*) AS checkpoints, max(checkpoint ->> 'ts') AS last_checkpoint
            FROM checkpoints GROUP BY thread_id),
r AS (SELECT thread_id, count(*) AS runs,
             count(*) FILTER (WHERE status IN ('pending', 'running')
                              AND updated_at < now() - make_interval(secs => %(stuck_s)s)) AS stuck,
             (array_agg(status ORDER BY created_at DESC))[1] AS last_run_status,
             (array_agg(assistant_id ORDER BY created_at DESC))[1] AS assistant_id,
             max(updated_at) AS last_run_at
      FROM runs GROUP BY thread_id)
SELECT COALESCE(t.thread_id, cp.thread_id) AS thread_id, t.status AS server_status,
       t.metadata_json ->> 'graph_id' AS graph_id, a.name AS assistant, t.user_id,
       t.created_at, t.updated_at, COALESCE(r.runs, 0) AS runs, r.last_run_status, COALESCE(r.stuck, 0) AS stuck_runs,
       COALESCE(cp.checkpoints, 0) AS checkpoints,
       CASE WHEN t.thread_id IS NULL THEN 'checkpoints_only' WHEN cp.thread_id IS NULL THEN 'server_only'
            ELSE 'both' END AS agreement
FROM thread t
FULL JOIN cp ON cp.thread_id = t.thread_id
LEFT JOIN r ON r.thread_id = COALESCE(t.thread_id, cp.thread_id)
LEFT JOIN assistant a ON a.assistant_id = r.assistant_id
WHERE (%(search)s = '' OR strpos(lower(COALESCE(t.thread_id, cp.thread_id)), lower(%(search)s)) > 0
       OR strpos(lower(COALESCE(t.metadata_json::text, '')), lower(%(search)s)) > 0)
  AND (cardinality(%(statuses)s::text[]) = 0 OR t.status = ANY(%(statuses)s))
  AND (%(agreement)s = '' OR CASE WHEN t.thread_id IS NULL THEN 'checkpoints_only'
                                  WHEN cp.thread_id IS NULL THEN 'server_only' ELSE 'both' END = %(agreement)s)
  AND (%(stuck_only)s = false OR COALESCE(r.stuck, 0) > 0)
ORDER BY COALESCE(t.updated_at, r.last_run_at) DESC NULLS LAST, 1
LIMIT %(limit)s"""
SELECT_RUNS = """
SELECT r.run_id, r.status, a.name AS assistant, r.assistant_id, r.created_at, r.updated_at, r.error_message,
       r.status IN ('pending', 'running') AND r.updated_at < now() - make_interval(secs => %(stuck_s)s) AS stuck
FROM runs r LEFT JOIN assistant a ON a.assistant_id = r.assistant_id
WHERE r.thread_id = %(thread_id)s
ORDER BY r.created_at DESC
LIMIT %(limit)s"""
# Runs left pending/running past the threshold (a server process killed mid-run leaves its run so for ever).
SELECT_STUCK = """
SELECT r.run_id, r.thread_id, r.status, a.name AS assistant, r.created_at, r.updated_at,
       extract(epoch FROM now() - r.updated_at) AS idle_s
FROM runs r LEFT JOIN assistant a ON a.assistant_id = r.assistant_id
WHERE r.status IN ('pending', 'running') AND r.updated_at < now() - make_interval(secs => %(stuck_s)s)
ORDER BY r.updated_at
LIMIT %(limit)s"""
COUNT_RUNS_BY_STATUS = """
SELECT status, count(*) AS runs,
       count(*) FILTER (WHERE status IN ('pending', 'running')
                        AND updated_at < now() - make_interval(secs => %(stuck_s)s)) AS stuck
FROM runs GROUP BY status"""

AGREEMENTS = ("both", "server_only", "checkpoints_only")
MAX_SEARCH = 200


def server_threads(
    db: Database,
    *,
    stuck_s: float,
    search: str = "",
    statuses: Iterable[str] = (),
    agreement: str = "",
    stuck_only: bool = False,
    limit: int = 500,
) -> pd.DataFrame:
    """The threads the server and the checkpoints know (see SELECT_THREADS), newest first. `search` is plain text
    (no pattern) matched in the thread id and its metadata; `statuses` the server's thread statuses; `agreement`
    one of AGREEMENTS or ''. Raises ValueError for an agreement it does not know, or a search with NUL or over
    MAX_SEARCH characters."""
    if agreement not in ("", *AGREEMENTS):
        raise ValueError(f"unknown agreement {agreement!r}")
    if "\x00" in search or len(search) > MAX_SEARCH:
        raise ValueError(f"a search is plain text of at most {MAX_SEARCH} characters, without NUL")
    params = {
        "stuck_s": float(stuck_s),
        "search": search,
        "statuses": list(statuses),
        "agreement": agreement,
        "stuck_only": stuck_only,
        "limit": int(limit),
    }
    return pd.DataFrame(db.fetch(SELECT_THREADS, params), columns=THREAD_COLUMNS)


THREAD_COLUMNS = [
    "thread_id",
    "server_status",
    "graph_id",
    "assistant",
    "user_id",
    "created_at",
    "updated_at",
    "runs",
    "last_run_status",
    "stuck_runs",
    "checkpoints",
    "agreement",
]
STUCK_COLUMNS = ["run_id", "thread_id", "status", "assistant", "created_at", "updated_at", "idle_s"]
RUN_COLUMNS = ["run_id", "status", "assistant", "assistant_id", "created_at", "updated_at", "error_message", "stuck"]


def thread_runs(db: Database, thread_id: str, *, stuck_s: float, limit: int = 200) -> pd.DataFrame:
    """One thread's runs, newest first, each flagged `stuck` when pending/running past `stuck_s` seconds."""
    rows = db.fetch(SELECT_RUNS, {"thread_id": thread_id, "stuck_s": float(stuck_s), "limit": int(limit)})
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def stuck_runs(db: Database, *, stuck_s: float, limit: int = 200) -> pd.DataFrame:
    rows = db.fetch(SELECT_STUCK, {"stuck_s": float(stuck_s), "limit": int(limit)})
    return pd.DataFrame(rows, columns=STUCK_COLUMNS)


def run_counts_conn(conn: psycopg.Connection[DictRow], stuck_s: float) -> dict[str, tuple[int, int]]:
    """status -> (runs, stuck runs), for the exporter."""
    rows = conn.execute(COUNT_RUNS_BY_STATUS, {"stuck_s": float(stuck_s)}).fetchall()
    return {r["status"]: (int(r["runs"]), int(r["stuck"])) for r in rows}


# --- the access export: what the customer said and got through the server --------------------------------------

SELECT_RUNS_FOR_EXPORT = """
SELECT r.thread_id, r.run_id, r.status, a.name AS assistant, r.created_at, r.updated_at, r.input, r.output,
       r.error_message
FROM runs r LEFT JOIN assistant a ON a.assistant_id = r.assistant_id
WHERE r.thread_id = ANY(%(threads)s)
ORDER BY r.created_at, r.run_id"""


def said(run_input: Any) -> str:
    """The words a run's input carries (its messages' text content, one per line); '' when it has none."""
    messages = run_input.get("messages") if isinstance(run_input, dict) else None
    lines = []
    for m in messages if isinstance(messages, list) else []:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):  # content blocks
            content = " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
        if isinstance(content, str) and content:
            lines.append(content)
    return "\n".join(lines)


def runs_for_export(conn: psycopg.Connection[DictRow], thread_ids: Iterable[str]) -> list[dict]:
    """The runs of the customer's threads, oldest first, each with its input as sent, `said` (the words in it),
    output and error."""
    rows = conn.execute(SELECT_RUNS_FOR_EXPORT, {"threads": sorted(set(thread_ids))}).fetchall()
    return [dict(r) | {"said": said(r["input"])} for r in rows]
