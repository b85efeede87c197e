-- Tool calls extracted from checkpoint history (core/checkpoints/tool_calls.py), so the pages that
-- count what agents did (the Preferences page: `recordar_preferencia`, `proponer_entrega`) are right
-- for any agent built on LangGraph, not only ours, without decoding checkpoint blobs on a page view.
-- Filled incrementally from a watermark by the sweep job and on demand; the primary keys make a
-- re-extraction of the same writes a no-op. Erasure finds these rows by their `thread_id` and
-- `cliente_id` columns like every other core_* table (args hold what the customer said).

-- One row per tool call of an AI message written to a checkpoint.
CREATE TABLE IF NOT EXISTS core_tool_calls (
    thread_id      text        NOT NULL,
    checkpoint_ns  text        NOT NULL,
    checkpoint_id  text        NOT NULL,
    task_id        text        NOT NULL,
    idx            integer     NOT NULL,   -- the write's idx within its task
    position       integer     NOT NULL,   -- the message's position within the write (0-based)
    call_index     integer     NOT NULL,   -- the call's position within the message (0-based)
    ts             timestamptz NOT NULL,   -- see `clock`
    clock          text        NOT NULL CHECK (clock IN ('checkpoint', 'replayed')),
    tool           text        NOT NULL,
    args           jsonb,
    call_id        text,
    cliente_id     text,                   -- checkpoint metadata `cliente_id` when the agent tagged the run
    agent          text,                   -- checkpoint metadata `agente` when present
    extracted_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, position, call_index)
);
-- `clock`: 'checkpoint' = the checkpoint's own `ts` (the time the checkpointer wrote it, real time);
-- 'replayed' = the time our demo replayed (metadata `core_replayed_at`, set only inside core.clock.simulated).
CREATE INDEX IF NOT EXISTS core_tool_calls_tool_ts_idx ON core_tool_calls (tool, ts);
CREATE INDEX IF NOT EXISTS core_tool_calls_cliente_idx ON core_tool_calls (cliente_id) WHERE cliente_id IS NOT NULL;

-- One row per thread and UTC day with at least one human message: the conversations denominator.
CREATE TABLE IF NOT EXISTS core_thread_days (
    thread_id       text        NOT NULL,
    day             date        NOT NULL,  -- UTC day of the messages (same clock as core_tool_calls.ts)
    first_human_at  timestamptz NOT NULL,
    last_human_at   timestamptz NOT NULL,
    cliente_id      text,
    PRIMARY KEY (thread_id, day)
);
CREATE INDEX IF NOT EXISTS core_thread_days_day_idx ON core_thread_days (day);
CREATE INDEX IF NOT EXISTS core_thread_days_last_idx ON core_thread_days (last_human_at DESC);

-- Where extraction got to: the last checkpoint processed, in (ts text, thread, ns, id) order.
CREATE TABLE IF NOT EXISTS core_extract_watermark (
    name           text PRIMARY KEY,
    ts             text        NOT NULL DEFAULT '',
    thread_id      text        NOT NULL DEFAULT '',
    checkpoint_ns  text        NOT NULL DEFAULT '',
    checkpoint_id  text        NOT NULL DEFAULT '',
    updated_at     timestamptz NOT NULL DEFAULT now()
);
INSERT INTO core_extract_watermark (name) VALUES ('tool_calls') ON CONFLICT (name) DO NOTHING;

-- The sweep job logs the extraction step.
ALTER TABLE core_sweep_log ADD COLUMN IF NOT EXISTS tool_calls_extracted bigint;
