"""Tool calls extracted from checkpoint history into `core_tool_calls` (migration 020).

What agents did (a `recordar_preferencia` call, a `proponer_entrega` proposal) is in the AI messages
they wrote to `checkpoint_writes`, whoever built the agent. Decoding those blobs is ~34 µs a write
(BENCHMARKS.md), far too slow for a page over 1M writes, so they are decoded once, in SQL, by the
canonical decoder (`core_checkpoint_payload` + `core_checkpoint_messages`, migration 005) and kept
in compact tables: one row per tool call, one row per thread and day with a human message (the
conversations denominator), and one row per payload the serializer would refuse (migration 021: the
Degradation page counts them). Only writes are scanned here: channel-value blobs hold every message
of the thread again at each step (5x the bytes of the writes; decoding them made the extraction ~10x
slower in bench/bench_tool_calls.py), so a refused blob is marked per thread by the views
(`core_checkpoints_view.refused_type`, the Checkpoints page), not counted here.

Incremental: checkpoints are taken in `(checkpoint->>'ts', thread_id, checkpoint_ns, checkpoint_id)`
order from a watermark (`core_extract_watermark`), a bounded batch per transaction, through the change
follower's copy of each checkpoint's key and `ts` (core_checkpoint_shadow, migration 144: no index of ours on
`checkpoints`); an extraction first applies what the slot holds when no follower runs
(core.capture.follower.apply_pending), else it is as of the follower. Writes land on a checkpoint after it is
created (while its step runs), a checkpoint may reach the follower after a later one was extracted, and the dual
saver resyncs buffered checkpoints with their original times, so the
sweep job re-reads a look-back window before the watermark (default 24 h); the primary keys make that
re-read a no-op for what was already extracted. The page only moves forward, bounded.

The same pass keeps the thread search's summary (one row per thread, its latest root checkpoint: times, status,
agent, metadata; migration 080) and the AI messages' token usage (`usage_metadata`, model from
`response_metadata`) with its per-thread and per-day rollups (core/history/usage.py reads them).

Where (issue 52): these tables live in the dashboard's own database (`db.ours`, core/sql/dashboard/010_extraction.sql;
the agents' own where PG_DASHBOARD is not set). Apart, a batch is three steps: the next keys after the watermark from
the shadow (ours), the decode over those keys on the agents' primary (the decoders and checkpoint tables are there;
arrays in, one row of JSON per table out, no temporary table), and the inserts with the watermark's advance in one
transaction of ours, which holds the watermark row from the first step: only that step writes, so a crash anywhere
repeats the batch, and every insert is idempotent (the usage rollups count only the messages inserted now). The
status re-check and the prune of deleted threads split the same way (RECHECK_STATUS's candidates from ours, their
status on the agents' side; PRUNE_ORPHANS_BY_SHADOW reads the shadow, only once the follower has recounted it).

Clock: a row's `ts` is the checkpoint's own `ts` (real time, written by the checkpointer). Only our
demo, which replays past days, tags its runs with metadata `core_replayed_at` (core.agents.retail
run_turn, inside agent_memory_runtime.clock.simulated); when present that time is used and `clock` says 'replayed'.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from core.capture.follower import apply_pending
from core.db import Database, dashboard_dsn_of, one

log = logging.getLogger(__name__)

WATERMARK = "tool_calls"
BATCH_CHECKPOINTS = 2_000  # checkpoints decoded per transaction
PAGE_MAX_CHECKPOINTS = 4_000  # what one page view may extract before it shows "behind" instead
SWEEP_LOOKBACK = timedelta(hours=24)
# A write (an interrupt, an error) lands on a checkpoint after it was created, maybe after the checkpoint was
# extracted: every run re-checks the status of the thread rows it wrote this long ago or less.
STATUS_RECHECK = timedelta(minutes=15)
# The re-check looks for writes that arrived after a summary was written, so only at threads whose latest checkpoint
# is recent: on a new install (or after a backlog) every summary was written a moment ago, and re-checking all of them
# (100,000 threads: 20-30 s, by every page at once) is what made the first minutes fail (issue 41). An agent's clock up
# to STATUS_CLOCK_SKEW behind the database's still gets its recent threads re-checked.
STATUS_CLOCK_SKEW = timedelta(hours=1)
# One re-check at a time across every dashboard process and the sweep: one running covers the others (they skip).
STATUS_LOCK_ID = 0x636F7265_73746174  # "corestat"
TRY_STATUS_LOCK = "SELECT pg_try_advisory_xact_lock(%s) AS got"
REPLAYED_KEY = "core_replayed_at"

SELECT_WATERMARK = """
SELECT ts, thread_id, checkpoint_ns, checkpoint_id, updated_at FROM core_extract_watermark WHERE name = %(name)s"""

ENSURE_WATERMARK = "INSERT INTO core_extract_watermark (name) VALUES (%(name)s) ON CONFLICT (name) DO NOTHING"
LOCK_WATERMARK = "SELECT 1 FROM core_extract_watermark WHERE name = %(name)s FOR UPDATE"


def next_nodes(alias: str) -> str:
    """SQL: the nodes the latest root checkpoint (`alias`.thread_id, `alias`.checkpoint_id) schedules next, as
    langgraph's `StateSnapshot.next` (migration 086: core_next_nodes); '{}' for a finished run. One primary-key
    lookup on checkpoints (and on checkpoint_blobs for pending Sends)."""
    return (
        "coalesce((SELECT core_next_nodes(c.thread_id, c.checkpoint_ns, c.checkpoint) FROM checkpoints c "
        f"WHERE c.thread_id = {alias}.thread_id AND c.checkpoint_ns = '' "
        f"AND c.checkpoint_id = {alias}.checkpoint_id), '{{}}')"
    )


def thread_status(alias: str, nodes: str) -> str:
    """SQL: a thread's status from its latest root checkpoint (`alias`.thread_id, `alias`.checkpoint_id), its
    pending writes and `nodes` (the SQL of its next nodes): 'error' (an `__error__` write), 'interrupted' (an
    `__interrupt__` write: langgraph's `interrupt()`), 'paused' (nodes scheduled next and neither write: a static
    `interrupt_before`/`interrupt_after`, or a run inside its step), else 'idle'. Index lookups on
    checkpoint_writes' primary key (thread, ns, checkpoint): a few rows each."""
    pending = (
        "EXISTS (SELECT 1 FROM checkpoint_writes w WHERE w.thread_id = {a}.thread_id AND w.checkpoint_ns = '' "
        "AND w.checkpoint_id = {a}.checkpoint_id AND w.channel = '{c}')"
    )
    return (
        f"CASE WHEN {pending.format(a=alias, c='__error__')} THEN 'error' "
        f"WHEN {pending.format(a=alias, c='__interrupt__')} THEN 'interrupted' "
        f"WHEN cardinality({nodes}) > 0 THEN 'paused' ELSE 'idle' END"
    )


# One batch, in three parts (issue 52: the extraction's tables live in the dashboard's own database, the checkpoints
# in the agents'): (1) the next checkpoint keys after the watermark, from the change follower's shadow (ours);
# (2) their writes filtered on the raw bytes (only blobs that can hold a chat message are decoded), the messages
# decoded by the canonical SQL decoder, and the rows to keep computed from them (agents' side: the decoders and the
# checkpoint tables are there); (3) those rows inserted idempotently (ours). Where both are one database (the default)
# the three are one statement, as before; apart, (1) and (3) run in one transaction of ours holding the watermark row,
# (2) in between on the agents' primary, and only (3) writes: a crash before its commit repeats the batch.
SELECT_KEYS = """
SELECT s.thread_id, s.checkpoint_ns, s.checkpoint_id, s.ts
FROM core_checkpoint_shadow s
WHERE s.ts >= %(ts)s
  AND (s.ts, s.thread_id, s.checkpoint_ns, s.checkpoint_id)
      > (%(ts)s, %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s)
ORDER BY s.ts, s.thread_id, s.checkpoint_ns, s.checkpoint_id
LIMIT %(limit)s"""

# (1) and the checkpoints' rows, one database.
CPS_AFTER_WATERMARK = """
cps AS MATERIALIZED (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, s.ts AS ts_text, c.metadata
    FROM core_checkpoint_shadow s
    JOIN checkpoints c
      ON c.thread_id = s.thread_id AND c.checkpoint_ns = s.checkpoint_ns AND c.checkpoint_id = s.checkpoint_id
    WHERE s.ts >= %(ts)s
      AND (s.ts, s.thread_id, s.checkpoint_ns, s.checkpoint_id)
          > (%(ts)s, %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s)
    ORDER BY s.ts, s.thread_id, s.checkpoint_ns, s.checkpoint_id
    LIMIT %(limit)s
)"""
# The checkpoints' rows of keys read in ours (1), on the agents' side.
CPS_OF_KEYS = """
cps AS MATERIALIZED (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, k.ts AS ts_text, c.metadata
    FROM unnest(%(threads)s::text[], %(namespaces)s::text[], %(ids)s::text[], %(tss)s::text[])
         AS k(thread_id, checkpoint_ns, checkpoint_id, ts)
    JOIN checkpoints c
      ON c.thread_id = k.thread_id AND c.checkpoint_ns = k.checkpoint_ns AND c.checkpoint_id = k.checkpoint_id
)"""

# (2): every write of these checkpoints decoded once, and the rows to keep (one CTE per table).
DECODE = (
    r"""
decoded AS MATERIALIZED (
    -- every write of these checkpoints, decoded once by the canonical SQL decoder
    SELECT cps.thread_id, cps.checkpoint_ns, cps.checkpoint_id, w.task_id, w.idx, w.channel,
           core_checkpoint_payload(w.type, w.blob) AS payload,
           coalesce(core_try_timestamptz(cps.metadata ->> 'core_replayed_at'),
                    core_try_timestamptz(cps.ts_text)) AS ts,
           CASE WHEN core_try_timestamptz(cps.metadata ->> 'core_replayed_at') IS NOT NULL
                THEN 'replayed' ELSE 'checkpoint' END AS clock,
           cps.metadata ->> 'cliente_id' AS cliente_id,
           cps.metadata ->> 'agente' AS agent,
           coalesce(cps.metadata ->> 'agente', cps.metadata ->> 'graph_id') AS run_agent
    FROM cps
    JOIN checkpoint_writes w
      ON w.thread_id = cps.thread_id AND w.checkpoint_ns = cps.checkpoint_ns AND w.checkpoint_id = cps.checkpoint_id
), msgs AS MATERIALIZED (
    SELECT d.thread_id, d.checkpoint_ns, d.checkpoint_id, d.task_id, d.idx, (m.ord - 1)::integer AS position,
           m.msg, d.ts, d.clock, d.cliente_id, d.agent
    FROM decoded d
    CROSS JOIN LATERAL jsonb_array_elements(core_checkpoint_messages(d.payload)) WITH ORDINALITY AS m(msg, ord)
), call_rows AS (
    SELECT m.thread_id, m.checkpoint_ns, m.checkpoint_id, m.task_id, m.idx, m.position,
           (c.ord - 1)::integer AS call_index, m.ts, m.clock, coalesce(c.call ->> 'name', '') AS tool,
           c.call -> 'args' AS args, c.call ->> 'id' AS call_id,
           m.cliente_id, m.agent
    FROM msgs m
    CROSS JOIN LATERAL jsonb_array_elements(m.msg -> 'tool_calls') WITH ORDINALITY AS c(call, ord)
    WHERE m.msg ->> 'kind' = 'ai' AND jsonb_typeof(m.msg -> 'tool_calls') = 'array' AND m.ts IS NOT NULL
), human_rows AS (
    SELECT thread_id, (ts AT TIME ZONE 'UTC')::date AS day, min(ts) AS first_human_at, max(ts) AS last_human_at,
           max(cliente_id) AS cliente_id
    FROM msgs WHERE msg ->> 'kind' = 'human' AND ts IS NOT NULL
    GROUP BY 1, 2
), refused_rows AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, 'write' AS kind, task_id || '/' || idx AS item, channel,
           r.refused_type
    FROM decoded CROSS JOIN LATERAL (SELECT core_refused_type(payload) AS refused_type OFFSET 0) r
    WHERE r.refused_type IS NOT NULL
), latest AS (
    -- each thread's latest root checkpoint in this batch (checkpoint ids are time-ordered uuid6 text)
    SELECT DISTINCT ON (thread_id) thread_id, checkpoint_id, metadata, ts, min(ts) OVER (PARTITION BY thread_id) AS
    first_ts
    FROM (SELECT thread_id, checkpoint_ns, checkpoint_id, metadata,
                 coalesce(core_try_timestamptz(metadata ->> 'core_replayed_at'), core_try_timestamptz(ts_text)) AS ts
          FROM cps) c
    WHERE checkpoint_ns = '' AND ts IS NOT NULL
    ORDER BY thread_id, checkpoint_id DESC
), summary_rows AS (
    SELECT l.thread_id, l.first_ts AS created_at, l.ts AS updated_at, l.checkpoint_id,
           core_try_bigint(l.metadata ->> 'step')::integer AS step,
           """
    + thread_status("l", "n.next_nodes")
    + r""" AS status, coalesce(l.metadata ->> 'agente', l.metadata ->> 'graph_id') AS agent,
           l.metadata, n.next_nodes
    FROM latest l CROSS JOIN LATERAL (SELECT """
    + next_nodes("l")
    + r""" AS next_nodes) n
), usage_src AS (
    -- AI messages' usage_metadata, once per message and thread (PRIMARY KEY (thread_id, message_key))
    SELECT d.thread_id,
           coalesce(u ->> 'id', concat_ws('/', d.checkpoint_ns, d.checkpoint_id, d.task_id, d.idx, u ->> 'position'))
           AS message_key,
           d.checkpoint_ns, d.checkpoint_id, d.ts, d.clock, d.run_agent AS agent, d.cliente_id, u ->> 'model' AS model,
           (u ->> 'input')::bigint AS input_tokens, (u ->> 'output')::bigint AS output_tokens,
           (u ->> 'cached')::bigint AS cached_tokens
    FROM decoded d CROSS JOIN LATERAL jsonb_array_elements(core_message_usages(d.payload)) AS u
    WHERE d.ts IS NOT NULL
), no_usage_src AS (
    -- AI messages without usage_metadata (migration 120): the Tokens and cost view says "partial" for their threads
    SELECT d.thread_id,
           coalesce(u ->> 'id', concat_ws('/', d.checkpoint_ns, d.checkpoint_id, d.task_id, d.idx, u ->> 'position'))
           AS message_key
    FROM decoded d CROSS JOIN LATERAL jsonb_array_elements(core_message_no_usages(d.payload)) AS u
    WHERE d.ts IS NOT NULL
)"""
)

# What (2) hands to (3) apart: each row source as JSON (its columns and their types in ours).
ROW_SOURCES = {
    "call_rows": "thread_id text, checkpoint_ns text, checkpoint_id text, task_id text, idx integer,"
    ' "position" integer, call_index integer, ts timestamptz, clock text, tool text, args jsonb, call_id text,'
    " cliente_id text, agent text",
    "human_rows": "thread_id text, day date, first_human_at timestamptz, last_human_at timestamptz, cliente_id text",
    "refused_rows": "thread_id text, checkpoint_ns text, checkpoint_id text, kind text, item text, channel text,"
    " refused_type text",
    "summary_rows": "thread_id text, created_at timestamptz, updated_at timestamptz, checkpoint_id text, step integer,"
    " status text, agent text, metadata jsonb, next_nodes text[]",
    "usage_src": "thread_id text, message_key text, checkpoint_ns text, checkpoint_id text, ts timestamptz, clock text,"
    " agent text, cliente_id text, model text, input_tokens bigint, output_tokens bigint, cached_tokens bigint",
    "no_usage_src": "thread_id text, message_key text",
}
DECODE_BATCH = (
    "WITH "
    + CPS_OF_KEYS.strip()
    + ", "
    + DECODE.strip()
    + "\nSELECT (SELECT count(*) FROM cps) AS checkpoints, (SELECT count(*) FROM decoded) AS writes,\n       "
    + ",\n       ".join(f"(SELECT coalesce(jsonb_agg(r), '[]')::text FROM {name} r) AS {name}" for name in ROW_SOURCES)
)
# (3)'s row sources apart: the JSON of (2), as rows.
DECODED_ROWS = ", ".join(
    f"{name} AS (SELECT * FROM jsonb_to_recordset(%({name})s::jsonb) AS r({columns}))"
    for name, columns in ROW_SOURCES.items()
)

# (3): the rows inserted idempotently; the usage rollups count only the messages inserted now.
WRITE = r"""
calls AS (
    INSERT INTO core_tool_calls (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, position, call_index,
                                 ts, clock, tool, args, call_id, cliente_id, agent)
    SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, position, call_index,
           ts, clock, tool, args, call_id, cliente_id, agent
    FROM call_rows
    ON CONFLICT DO NOTHING
    RETURNING 1
), humans AS (
    INSERT INTO core_thread_days AS d (thread_id, day, first_human_at, last_human_at, cliente_id)
    SELECT thread_id, day, first_human_at, last_human_at, cliente_id FROM human_rows
    ON CONFLICT (thread_id, day) DO UPDATE
    SET first_human_at = least(d.first_human_at, EXCLUDED.first_human_at),
        last_human_at = greatest(d.last_human_at, EXCLUDED.last_human_at),
        cliente_id = coalesce(d.cliente_id, EXCLUDED.cliente_id)
    WHERE EXCLUDED.first_human_at < d.first_human_at OR EXCLUDED.last_human_at > d.last_human_at
       OR (d.cliente_id IS NULL AND EXCLUDED.cliente_id IS NOT NULL)
    RETURNING 1
), refused_writes AS (
    INSERT INTO core_refused_payloads (thread_id, checkpoint_ns, checkpoint_id, kind, item, channel, refused_type)
    SELECT thread_id, checkpoint_ns, checkpoint_id, kind, item, channel, refused_type FROM refused_rows
    ON CONFLICT DO NOTHING
    RETURNING 1
), summary AS (
    INSERT INTO core_thread_summary AS s (thread_id, created_at, updated_at, checkpoint_id, step, status, agent,
                                          metadata, next_nodes)
    SELECT thread_id, created_at, updated_at, checkpoint_id, step, status, agent, metadata, next_nodes
    FROM summary_rows
    ON CONFLICT (thread_id) DO UPDATE
    SET created_at = least(s.created_at, EXCLUDED.created_at), updated_at = EXCLUDED.updated_at,
        checkpoint_id = EXCLUDED.checkpoint_id, step = EXCLUDED.step, status = EXCLUDED.status,
        agent = EXCLUDED.agent, metadata = EXCLUDED.metadata, next_nodes = EXCLUDED.next_nodes, refreshed_at = now()
    WHERE EXCLUDED.checkpoint_id >= s.checkpoint_id
    RETURNING 1
), usage_rows AS (
    INSERT INTO core_message_usage (thread_id, message_key, checkpoint_ns, checkpoint_id, ts, clock, agent, cliente_id,
                                    model, input_tokens, output_tokens, cached_tokens)
    SELECT thread_id, message_key, checkpoint_ns, checkpoint_id, ts, clock, agent, cliente_id,
           model, input_tokens, output_tokens, cached_tokens
    FROM usage_src
    ON CONFLICT DO NOTHING
    RETURNING thread_id, ts, coalesce(agent, '') AS agent, coalesce(model, '') AS model,
              input_tokens, output_tokens, cached_tokens
), no_usage_rows AS (
    INSERT INTO core_message_no_usage (thread_id, message_key)
    SELECT thread_id, message_key FROM no_usage_src
    ON CONFLICT DO NOTHING
    RETURNING 1
), usage_threads AS (
    INSERT INTO core_usage_threads AS t (thread_id, model, agent, messages, input_tokens, output_tokens, cached_tokens,
                                         last_ts)
    SELECT thread_id, model, max(agent), count(*), sum(input_tokens), sum(output_tokens), sum(cached_tokens), max(ts)
    FROM usage_rows GROUP BY thread_id, model
    ON CONFLICT (thread_id, model) DO UPDATE
    SET agent = EXCLUDED.agent, messages = t.messages + EXCLUDED.messages,
        input_tokens = t.input_tokens + EXCLUDED.input_tokens, output_tokens = t.output_tokens + EXCLUDED.output_tokens,
        cached_tokens = t.cached_tokens + EXCLUDED.cached_tokens, last_ts = greatest(t.last_ts, EXCLUDED.last_ts)
    RETURNING 1
), usage_days AS (
    INSERT INTO core_usage_days AS u (day, agent, model, messages, input_tokens, output_tokens, cached_tokens)
    SELECT (ts AT TIME ZONE 'UTC')::date, agent, model, count(*), sum(input_tokens), sum(output_tokens),
           sum(cached_tokens)
    FROM usage_rows GROUP BY 1, 2, 3
    ON CONFLICT (day, agent, model) DO UPDATE
    SET messages = u.messages + EXCLUDED.messages, input_tokens = u.input_tokens + EXCLUDED.input_tokens,
        output_tokens = u.output_tokens + EXCLUDED.output_tokens, cached_tokens = u.cached_tokens +
        EXCLUDED.cached_tokens
    RETURNING 1
)"""
WRITTEN_COUNTS = ("calls", "thread_days", "refused", "threads", "usages", "usage_rollups")
WRITTEN = """
       (SELECT count(*) FROM calls) AS calls,
       (SELECT count(*) FROM humans) AS thread_days,
       (SELECT count(*) FROM refused_writes) AS refused,
       (SELECT count(*) FROM summary) AS threads,
       (SELECT count(*) FROM usage_rows) AS usages,
       (SELECT count(*) FROM usage_threads) + (SELECT count(*) FROM usage_days) AS usage_rollups"""
# (3) apart, in ours.
WRITE_BATCH = "WITH " + DECODED_ROWS + ", " + WRITE.strip() + "\nSELECT" + WRITTEN
# (1), (2) and (3) as one statement, where ours is the agents' database.
EXTRACT_BATCH = (
    "WITH "
    + CPS_AFTER_WATERMARK.strip()
    + ", "
    + DECODE.strip()
    + ", "
    + WRITE.strip()
    + """, last AS (
    SELECT ts_text, thread_id, checkpoint_ns, checkpoint_id FROM cps
    ORDER BY ts_text DESC, thread_id DESC, checkpoint_ns DESC, checkpoint_id DESC LIMIT 1
)
SELECT (SELECT count(*) FROM cps) AS checkpoints,
       (SELECT count(*) FROM decoded) AS writes,"""
    + WRITTEN
    + """,
       l.ts_text AS ts, l.thread_id, l.checkpoint_ns, l.checkpoint_id
FROM (SELECT 1) one LEFT JOIN last l ON true"""
)

# Forward only: the stored key never moves back (a look-back run re-reads without rewinding it).
ADVANCE_WATERMARK = """
UPDATE core_extract_watermark
SET ts = %(ts)s, thread_id = %(thread_id)s, checkpoint_ns = %(checkpoint_ns)s, checkpoint_id = %(checkpoint_id)s,
    updated_at = now()
WHERE name = %(name)s
  AND (ts, thread_id, checkpoint_ns, checkpoint_id) < (%(ts)s, %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s)"""

RECHECK_STATUS = (
    """
WITH now_is AS (
    SELECT s.thread_id, n.next_nodes, """
    + thread_status("s", "n.next_nodes")
    + """ AS status
    FROM core_thread_summary s CROSS JOIN LATERAL (SELECT """
    + next_nodes("s")
    + """ AS next_nodes) n
    WHERE s.refreshed_at >= now() - %(window)s::interval
      AND s.updated_at >= now() - %(window)s::interval - %(skew)s::interval)
UPDATE core_thread_summary s SET status = now_is.status, next_nodes = now_is.next_nodes
FROM now_is
WHERE s.thread_id = now_is.thread_id AND (s.status, s.next_nodes) IS DISTINCT FROM (now_is.status, now_is.next_nodes)"""
)

# Checkpoints after the watermark (capped: the page only needs "behind by about N").
COUNT_BEHIND = """
SELECT count(*) AS n FROM (
    SELECT 1 FROM core_checkpoint_shadow s
    WHERE s.ts >= %(ts)s
      AND (s.ts, s.thread_id, s.checkpoint_ns, s.checkpoint_id)
          > (%(ts)s, %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s)
    LIMIT %(cap)s) b"""

# Rows of threads the checkpointer no longer holds (retention, delete_thread): args are what a
# customer said, so they do not outlive the thread.
# The per-day usage totals (core_usage_days) stay: what deleted threads cost was spent.
DERIVED_PER_THREAD = (
    "core_refused_payloads",
    "core_tool_calls",
    "core_thread_days",
    "core_thread_summary",
    "core_message_usage",
    "core_usage_threads",
    "core_message_no_usage",
)
PRUNE_ORPHANS = (
    "WITH "
    + ",\n".join(
        f"gone_{i} AS (DELETE FROM {table} t WHERE NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = "
        "t.thread_id)"
        " RETURNING 1)"
        for i, table in enumerate(DERIVED_PER_THREAD)
    )
    + "\nSELECT "
    + " + ".join(f"(SELECT count(*) FROM gone_{i})" for i in range(len(DERIVED_PER_THREAD)))
    + " AS n"
)


# The same apart (issue 52): the summaries to re-check from ours, their status on the agents' side, the changes written
# in ours (only where the summary is still of that checkpoint: an extraction may have moved it meanwhile).
SELECT_RECHECK = """
SELECT thread_id, checkpoint_id FROM core_thread_summary s
WHERE s.refreshed_at >= now() - %(window)s::interval
  AND s.updated_at >= now() - %(window)s::interval - %(skew)s::interval"""
STATUS_OF = (
    """
SELECT k.thread_id, k.checkpoint_id, """
    + thread_status("k", "n.next_nodes")
    + """ AS status, n.next_nodes
FROM unnest(%(threads)s::text[], %(ids)s::text[]) AS k(thread_id, checkpoint_id)
CROSS JOIN LATERAL (SELECT """
    + next_nodes("k")
    + """ AS next_nodes) n"""
)
UPDATE_STATUS = """
UPDATE core_thread_summary s SET status = n.status, next_nodes = n.next_nodes
FROM jsonb_to_recordset(%(rows)s::jsonb) AS n(thread_id text, checkpoint_id text, status text, next_nodes text[])
WHERE s.thread_id = n.thread_id AND s.checkpoint_id = n.checkpoint_id
  AND (s.status, s.next_nodes) IS DISTINCT FROM (n.status, n.next_nodes)"""

# The same apart (issue 52), in ours: a thread is gone when the change follower's shadow holds none of its checkpoints,
# and only while the shadow is whole (a recount done: after a crash of our server its unlogged tables are empty until
# the follower recounts, and an empty shadow must not read as "every thread deleted").
PRUNE_ORPHANS_BY_SHADOW = (
    "WITH whole AS (SELECT EXISTS (SELECT 1 FROM core_capture_position WHERE recounted_at IS NOT NULL) AS ok), "
    + ",\n".join(
        f"gone_{i} AS (DELETE FROM {table} t WHERE (SELECT ok FROM whole) AND NOT EXISTS "
        "(SELECT 1 FROM core_checkpoint_shadow c WHERE c.thread_id = t.thread_id) RETURNING 1)"
        for i, table in enumerate(DERIVED_PER_THREAD)
    )
    + "\nSELECT "
    + " + ".join(f"(SELECT count(*) FROM gone_{i})" for i in range(len(DERIVED_PER_THREAD)))
    + " AS n"
)


@dataclass(frozen=True)
class Watermark:
    ts: str = ""
    thread_id: str = ""
    checkpoint_ns: str = ""
    checkpoint_id: str = ""

    def params(self) -> dict[str, str]:
        return {
            "ts": self.ts,
            "thread_id": self.thread_id,
            "checkpoint_ns": self.checkpoint_ns,
            "checkpoint_id": self.checkpoint_id,
        }

    def rewound(self, by: timedelta) -> Watermark:
        """The key `by` earlier (checkpoint ts is ISO 8601 UTC text: text order is time order)."""
        if not self.ts:
            return Watermark()
        at = datetime.fromisoformat(self.ts) - by
        return Watermark(at.astimezone(UTC).isoformat())


@dataclass
class ExtractResult:
    checkpoints: int = 0  # checkpoints read (writes decoded are those of these checkpoints)
    writes: int = 0  # checkpoint writes decoded
    calls: int = 0  # tool calls inserted (already extracted ones are not counted)
    refused: int = 0  # payloads newly found that the serializer would refuse (core_refused_payloads)
    thread_days: int = 0  # thread-days inserted or widened
    threads: int = 0  # thread summaries written (core_thread_summary: search, status)
    usages: int = 0  # AI messages with usage_metadata newly extracted (core_message_usage)
    statuses: int = 0  # thread statuses changed by the re-check (a late interrupt or error write)
    statuses_skipped: bool = False  # another run was re-checking at that moment (its re-check covers this one)
    batches: int = 0
    behind: int = 0  # checkpoints still after the watermark when it stopped (capped)
    pruned: int = 0
    error: str | None = None  # why a page could not extract (e.g. a read-only database role)

    @property
    def caught_up(self) -> bool:
        return self.behind == 0


def watermark(db: Database) -> Watermark:
    """The extraction's watermark (kept in the dashboard's database, `db.ours`)."""
    return watermark_in(db.ours)


def watermark_in(ours: Database) -> Watermark:
    row = ours.fetch_one(SELECT_WATERMARK, {"name": WATERMARK}, read_only=False)
    if row is None:
        return Watermark()
    return Watermark(row["ts"], row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"])


def watermark_of(conn: psycopg.Connection[Any]) -> Watermark | None:
    """The stored watermark (None: the extraction never ran) for the agents' database `conn` is connected to, read in
    the dashboard's database (on a connection of its own when that is not `conn`'s)."""
    ours = dashboard_dsn_of(conn)
    with contextlib.ExitStack() as stack:
        mine = stack.enter_context(psycopg.connect(ours)) if ours else conn
        row = mine.execute(SELECT_WATERMARK, {"name": WATERMARK}).fetchone()
    if row is None:
        return None
    values = list(row.values()) if isinstance(row, dict) else list(row)
    return Watermark(*values[:4])


def checkpoints_behind(db: Database, cap: int = 100_000, *, apply: bool = True) -> int:
    """Checkpoints after the watermark, counted up to `cap` (after applying what the slot holds when no change
    follower runs, unless `apply` is False)."""
    if apply:
        apply_pending(db.dsn)
    ours = db.ours
    return one(ours.fetch_one(COUNT_BEHIND, {**watermark_in(ours).params(), "cap": cap}, read_only=False))["n"]


@dataclass
class _Batch:
    """What one batch read and wrote: the counts of EXTRACT_BATCH / DECODE_BATCH + WRITE_BATCH, and the last key."""

    row: dict[str, Any]
    keys: int  # checkpoint keys taken after the watermark (ends the loop when under the limit)
    last: Watermark | None


def _batch_together(db: Database, key: Watermark, limit: int) -> _Batch:
    """(1), (2) and (3) as one statement, in one transaction holding the watermark row (ours is the agents')."""
    with db.connection() as conn, conn.transaction():
        conn.execute(ENSURE_WATERMARK, {"name": WATERMARK})
        conn.execute(LOCK_WATERMARK, {"name": WATERMARK})
        row = one(conn.execute(EXTRACT_BATCH, {**key.params(), "limit": limit}).fetchone())
        last = None
        if row["checkpoints"]:
            last = Watermark(row["ts"], row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"])
            conn.execute(ADVANCE_WATERMARK, {**last.params(), "name": WATERMARK})
    return _Batch(row, row["checkpoints"], last)


def decode_batch(conn: psycopg.Connection[Any], keys: list[dict[str, Any]]) -> dict[str, Any]:
    """(2) on the agents' side: the rows to keep of the checkpoints `keys` (from SELECT_KEYS), each source as JSON."""
    params = {
        "threads": [k["thread_id"] for k in keys],
        "namespaces": [k["checkpoint_ns"] for k in keys],
        "ids": [k["checkpoint_id"] for k in keys],
        "tss": [k["ts"] for k in keys],
    }
    return one(conn.execute(DECODE_BATCH, params, prepare=False).fetchone())


def write_batch(conn: psycopg.Connection[Any], decoded: dict[str, Any]) -> dict[str, Any]:
    """(3) in ours, in the caller's transaction: the decoded rows inserted idempotently."""
    return one(conn.execute(WRITE_BATCH, {name: decoded[name] for name in ROW_SOURCES}, prepare=False).fetchone())


def _batch_apart(db: Database, ours: Database, key: Watermark, limit: int) -> _Batch:
    """(1) and (3) in one transaction of ours holding the watermark row, (2) on the agents' primary in between.
    Nothing is written before (3): a failure anywhere leaves the watermark where it was and the batch is read again."""
    with ours.connection() as mine, mine.transaction():
        mine.execute(ENSURE_WATERMARK, {"name": WATERMARK})
        mine.execute(LOCK_WATERMARK, {"name": WATERMARK})
        keys = mine.execute(SELECT_KEYS, {**key.params(), "limit": limit}).fetchall()
        if not keys:
            return _Batch(dict.fromkeys(("checkpoints", "writes", *WRITTEN_COUNTS), 0), 0, None)
        with db.connection() as theirs:
            decoded = decode_batch(theirs, keys)
        row = {"checkpoints": decoded["checkpoints"], "writes": decoded["writes"], **write_batch(mine, decoded)}
        k = keys[-1]
        last = Watermark(k["ts"], k["thread_id"], k["checkpoint_ns"], k["checkpoint_id"])
        mine.execute(ADVANCE_WATERMARK, {**last.params(), "name": WATERMARK})
    return _Batch(row, len(keys), last)


def _recheck_statuses(db: Database, ours: Database, result: ExtractResult) -> None:
    params = {"window": STATUS_RECHECK, "skew": STATUS_CLOCK_SKEW}
    with ours.connection() as mine, mine.transaction():
        if not one(mine.execute(TRY_STATUS_LOCK, (STATUS_LOCK_ID,)).fetchone())["got"]:
            result.statuses_skipped = True  # another process or session is re-checking right now
            return
        if ours is db:
            result.statuses = mine.execute(RECHECK_STATUS, params).rowcount
            return
        candidates = mine.execute(SELECT_RECHECK, params).fetchall()
        if not candidates:
            return
        with db.connection() as theirs:
            found = theirs.execute(
                STATUS_OF,
                {"threads": [c["thread_id"] for c in candidates], "ids": [c["checkpoint_id"] for c in candidates]},
                prepare=False,
            ).fetchall()
        rows = [{**r, "next_nodes": list(r["next_nodes"])} for r in found]
        result.statuses = mine.execute(UPDATE_STATUS, {"rows": json.dumps(rows)}, prepare=False).rowcount


def extract(
    db: Database,
    *,
    max_checkpoints: int | None = None,
    lookback: timedelta | None = None,
    batch: int = BATCH_CHECKPOINTS,
    on_batch: Callable[[ExtractResult], None] | None = None,
) -> ExtractResult:
    """Extract tool calls and human-message thread-days from the checkpoints after the watermark.

    `max_checkpoints` bounds the work (None: until caught up); `lookback` re-reads that much before the
    watermark first (late writes, resynced checkpoints), without moving the watermark back. Each batch
    is one transaction (of the dashboard's database) holding the watermark row, so concurrent runs take turns.
    Idempotent."""
    if batch < 1:
        raise ValueError("batch must be >= 1")
    apply_pending(db.dsn)
    ours = db.ours
    result = ExtractResult()
    key = watermark_in(ours)
    if lookback:
        key = key.rewound(lookback)
    while max_checkpoints is None or result.checkpoints < max_checkpoints:
        limit = batch if max_checkpoints is None else min(batch, max_checkpoints - result.checkpoints)
        done = _batch_together(db, key, limit) if ours is db else _batch_apart(db, ours, key, limit)
        row = done.row
        if done.last is not None:
            key = done.last
        result.checkpoints += row["checkpoints"]
        result.writes += row["writes"]
        result.calls += row["calls"]
        result.refused += row["refused"]
        result.thread_days += row["thread_days"]
        result.threads += row["threads"]
        result.usages += row["usages"]
        result.batches += 1
        if on_batch:
            on_batch(result)
        if done.keys < limit:
            break
    _recheck_statuses(db, ours, result)
    result.behind = checkpoints_behind(db, apply=False)
    log.info(
        "tool calls: %d checkpoints (%d writes) read, %d calls, %d thread-days, %d refused payloads, "
        "%d thread summaries (%d statuses re-checked) and %d usages extracted in %d batches, %d behind",
        result.checkpoints,
        result.writes,
        result.calls,
        result.thread_days,
        result.refused,
        result.threads,
        result.statuses,
        result.usages,
        result.batches,
        result.behind,
    )
    return result


def catch_up(db: Database, max_checkpoints: int = PAGE_MAX_CHECKPOINTS) -> ExtractResult:
    """What a page calls before reading: forward from the watermark, at most `max_checkpoints`.
    A dashboard running with a read-only role cannot extract: the result then carries the error and
    how far behind the tables are (the sweep job, on the primary, keeps them current)."""
    try:
        return extract(db, max_checkpoints=max_checkpoints)
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction) as exc:
        log.warning("tool calls not extracted by the page: %s", exc)
        return ExtractResult(behind=checkpoints_behind(db), error=str(exc).splitlines()[0])


def sweep_step(db: Database) -> ExtractResult:
    """The sweep job's step: drop rows of deleted threads, then extract with the look-back window. Apart (issue 52),
    a thread is deleted when the change follower's shadow no longer holds it: what the slot holds is applied first."""
    ours = db.ours
    if ours is db:
        pruned = one(db.fetch_one(PRUNE_ORPHANS, read_only=False))["n"]
    else:
        apply_pending(db.dsn)
        pruned = one(ours.fetch_one(PRUNE_ORPHANS_BY_SHADOW, read_only=False))["n"]
    result = extract(db, lookback=SWEEP_LOOKBACK)
    result.pruned = pruned
    return result


def args_in_words(call: dict, value: Callable[[Any], str]) -> str:
    """A LangChain tool call's arguments as a person reads them, `tipo = recogida, valor = ...` (each value written by
    `value`): the one convention of the Checkpoints page and the art. 15 export."""
    args = found if isinstance(found := call.get("args"), dict) else {}
    return ", ".join(f"{k} = {value(v)}" for k, v in args.items())
