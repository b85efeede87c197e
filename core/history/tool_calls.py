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

Clock: a row's `ts` is the checkpoint's own `ts` (real time, written by the checkpointer). Only our
demo, which replays past days, tags its runs with metadata `core_replayed_at` (core.agents.retail
run_turn, inside agent_memory_runtime.clock.simulated); when present that time is used and `clock` says 'replayed'.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from core.capture.follower import apply_pending
from core.db import Database, one

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


# One batch: the next checkpoints after the key, their writes filtered on the raw bytes (only blobs
# that can hold a chat message are decoded), the messages decoded by the canonical SQL decoder, the
# AI messages' tool calls and the human messages' thread-days inserted idempotently.
EXTRACT_BATCH = (
    r"""
WITH cps AS MATERIALIZED (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, s.ts AS ts_text, c.metadata
    FROM core_checkpoint_shadow s
    JOIN checkpoints c
      ON c.thread_id = s.thread_id AND c.checkpoint_ns = s.checkpoint_ns AND c.checkpoint_id = s.checkpoint_id
    WHERE s.ts >= %(ts)s
      AND (s.ts, s.thread_id, s.checkpoint_ns, s.checkpoint_id)
          > (%(ts)s, %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s)
    ORDER BY s.ts, s.thread_id, s.checkpoint_ns, s.checkpoint_id
    LIMIT %(limit)s
), decoded AS MATERIALIZED (
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
), calls AS (
    INSERT INTO core_tool_calls (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, position, call_index,
                                 ts, clock, tool, args, call_id, cliente_id, agent)
    SELECT m.thread_id, m.checkpoint_ns, m.checkpoint_id, m.task_id, m.idx, m.position, (c.ord - 1)::integer,
           m.ts, m.clock, coalesce(c.call ->> 'name', ''), c.call -> 'args', c.call ->> 'id', m.cliente_id, m.agent
    FROM msgs m
    CROSS JOIN LATERAL jsonb_array_elements(m.msg -> 'tool_calls') WITH ORDINALITY AS c(call, ord)
    WHERE m.msg ->> 'kind' = 'ai' AND jsonb_typeof(m.msg -> 'tool_calls') = 'array' AND m.ts IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING 1
), humans AS (
    INSERT INTO core_thread_days AS d (thread_id, day, first_human_at, last_human_at, cliente_id)
    SELECT thread_id, (ts AT TIME ZONE 'UTC')::date, min(ts), max(ts), max(cliente_id)
    FROM msgs WHERE msg ->> 'kind' = 'human' AND ts IS NOT NULL
    GROUP BY 1, 2
    ON CONFLICT (thread_id, day) DO UPDATE
    SET first_human_at = least(d.first_human_at, EXCLUDED.first_human_at),
        last_human_at = greatest(d.last_human_at, EXCLUDED.last_human_at),
        cliente_id = coalesce(d.cliente_id, EXCLUDED.cliente_id)
    WHERE EXCLUDED.first_human_at < d.first_human_at OR EXCLUDED.last_human_at > d.last_human_at
       OR (d.cliente_id IS NULL AND EXCLUDED.cliente_id IS NOT NULL)
    RETURNING 1
), refused_writes AS (
    INSERT INTO core_refused_payloads (thread_id, checkpoint_ns, checkpoint_id, kind, item, channel, refused_type)
    SELECT thread_id, checkpoint_ns, checkpoint_id, 'write', task_id || '/' || idx, channel, r.refused_type
    FROM decoded CROSS JOIN LATERAL (SELECT core_refused_type(payload) AS refused_type OFFSET 0) r
    WHERE r.refused_type IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING 1
), latest AS (
    -- each thread's latest root checkpoint in this batch (checkpoint ids are time-ordered uuid6 text)
    SELECT DISTINCT ON (thread_id) thread_id, checkpoint_id, metadata, ts, min(ts) OVER (PARTITION BY thread_id) AS
    first_ts
    FROM (SELECT thread_id, checkpoint_ns, checkpoint_id, metadata,
                 coalesce(core_try_timestamptz(metadata ->> 'core_replayed_at'), core_try_timestamptz(ts_text)) AS ts
          FROM cps) c
    WHERE checkpoint_ns = '' AND ts IS NOT NULL
    ORDER BY thread_id, checkpoint_id DESC
), summary AS (
    INSERT INTO core_thread_summary AS s (thread_id, created_at, updated_at, checkpoint_id, step, status, agent,
    metadata,
                                          next_nodes)
    SELECT l.thread_id, l.first_ts, l.ts, l.checkpoint_id, core_try_bigint(l.metadata ->> 'step')::integer,
           """
    + thread_status("l", "n.next_nodes")
    + r""", coalesce(l.metadata ->> 'agente', l.metadata ->> 'graph_id'),
           l.metadata, n.next_nodes
    FROM latest l CROSS JOIN LATERAL (SELECT """
    + next_nodes("l")
    + r""" AS next_nodes) n
    ON CONFLICT (thread_id) DO UPDATE
    SET created_at = least(s.created_at, EXCLUDED.created_at), updated_at = EXCLUDED.updated_at,
        checkpoint_id = EXCLUDED.checkpoint_id, step = EXCLUDED.step, status = EXCLUDED.status,
        agent = EXCLUDED.agent, metadata = EXCLUDED.metadata, next_nodes = EXCLUDED.next_nodes, refreshed_at = now()
    WHERE EXCLUDED.checkpoint_id >= s.checkpoint_id
    RETURNING 1
), usage_rows AS (
    -- AI messages' usage_metadata, once per message and thread (PRIMARY KEY (thread_id, message_key))
    INSERT INTO core_message_usage (thread_id, message_key, checkpoint_ns, checkpoint_id, ts, clock, agent, cliente_id,
                                    model, input_tokens, output_tokens, cached_tokens)
    SELECT d.thread_id,
           coalesce(u ->> 'id', concat_ws('/', d.checkpoint_ns, d.checkpoint_id, d.task_id, d.idx, u ->> 'position')),
           d.checkpoint_ns, d.checkpoint_id, d.ts, d.clock, d.run_agent, d.cliente_id, u ->> 'model',
           (u ->> 'input')::bigint, (u ->> 'output')::bigint, (u ->> 'cached')::bigint
    FROM decoded d CROSS JOIN LATERAL jsonb_array_elements(core_message_usages(d.payload)) AS u
    WHERE d.ts IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING thread_id, ts, coalesce(agent, '') AS agent, coalesce(model, '') AS model,
              input_tokens, output_tokens, cached_tokens
), no_usage_rows AS (
    -- AI messages without usage_metadata (migration 120): the Tokens and cost view says "partial" for their threads
    INSERT INTO core_message_no_usage (thread_id, message_key)
    SELECT d.thread_id,
           coalesce(u ->> 'id', concat_ws('/', d.checkpoint_ns, d.checkpoint_id, d.task_id, d.idx, u ->> 'position'))
    FROM decoded d CROSS JOIN LATERAL jsonb_array_elements(core_message_no_usages(d.payload)) AS u
    WHERE d.ts IS NOT NULL
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
), last AS (
    SELECT ts_text, thread_id, checkpoint_ns, checkpoint_id FROM cps
    ORDER BY ts_text DESC, thread_id DESC, checkpoint_ns DESC, checkpoint_id DESC LIMIT 1
)
SELECT (SELECT count(*) FROM cps) AS checkpoints,
       (SELECT count(*) FROM decoded) AS writes,
       (SELECT count(*) FROM calls) AS calls,
       (SELECT count(*) FROM humans) AS thread_days,
       (SELECT count(*) FROM refused_writes) AS refused,
       (SELECT count(*) FROM summary) AS threads,
       (SELECT count(*) FROM usage_rows) AS usages,
       (SELECT count(*) FROM usage_threads) + (SELECT count(*) FROM usage_days) AS usage_rollups,
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
    row = db.fetch_one(SELECT_WATERMARK, {"name": WATERMARK}, read_only=False)
    if row is None:
        return Watermark()
    return Watermark(row["ts"], row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"])


def checkpoints_behind(db: Database, cap: int = 100_000, *, apply: bool = True) -> int:
    """Checkpoints after the watermark, counted up to `cap` (after applying what the slot holds when no change
    follower runs, unless `apply` is False)."""
    if apply:
        apply_pending(db.dsn)
    return one(db.fetch_one(COUNT_BEHIND, {**watermark(db).params(), "cap": cap}, read_only=False))["n"]


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
    is one transaction holding the watermark row, so concurrent runs take turns. Idempotent."""
    if batch < 1:
        raise ValueError("batch must be >= 1")
    apply_pending(db.dsn)
    result = ExtractResult()
    key = watermark(db)
    if lookback:
        key = key.rewound(lookback)
    while max_checkpoints is None or result.checkpoints < max_checkpoints:
        limit = batch if max_checkpoints is None else min(batch, max_checkpoints - result.checkpoints)
        with db.connection() as conn, conn.transaction():
            conn.execute(ENSURE_WATERMARK, {"name": WATERMARK})
            conn.execute(LOCK_WATERMARK, {"name": WATERMARK})
            row = one(conn.execute(EXTRACT_BATCH, {**key.params(), "limit": limit}).fetchone())
            if row["checkpoints"]:
                key = Watermark(row["ts"], row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"])
                conn.execute(ADVANCE_WATERMARK, {**key.params(), "name": WATERMARK})
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
        if row["checkpoints"] < limit:
            break
    with db.connection() as conn, conn.transaction():
        if one(conn.execute(TRY_STATUS_LOCK, (STATUS_LOCK_ID,)).fetchone())["got"]:
            params = {"window": STATUS_RECHECK, "skew": STATUS_CLOCK_SKEW}
            result.statuses = conn.execute(RECHECK_STATUS, params).rowcount
        else:  # another process or session is re-checking right now
            result.statuses_skipped = True
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
    """The sweep job's step: drop rows of deleted threads, then extract with the look-back window."""
    pruned = one(db.fetch_one(PRUNE_ORPHANS, read_only=False))["n"]
    result = extract(db, lookback=SWEEP_LOOKBACK)
    result.pruned = pruned
    return result


def args_in_words(call: dict, value: Callable[[Any], str]) -> str:
    """A LangChain tool call's arguments as a person reads them, `tipo = recogida, valor = ...` (each value written by
    `value`): the one convention of the Checkpoints page and the art. 15 export."""
    args = found if isinstance(found := call.get("args"), dict) else {}
    return ", ".join(f"{k} = {value(v)}" for k, v in args.items())
