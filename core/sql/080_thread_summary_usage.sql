-- Thread search and token usage (issue 31 items 1 and 2), kept by the same incremental pass that extracts
-- tool calls (core/checkpoints/tool_calls.py), never by triggers on the agents' writes (BENCHMARKS.md: our
-- triggers already cost ~45 % of a checkpoint write). The sweep job keeps them current; a page view catches up
-- a bounded number of checkpoints; pages show the extraction's time ("as of"). Erasure finds the rows by
-- `thread_id` like every other core_* table; the orphan prune drops rows of deleted threads.

-- One row per thread: what LangGraph's Agent Server `/threads/search` filters and sorts on, read from the
-- thread's latest root checkpoint (checkpoint_ns = '') and that checkpoint's pending writes.
CREATE TABLE IF NOT EXISTS core_thread_summary (
    thread_id      text        PRIMARY KEY,
    created_at     timestamptz NOT NULL,   -- first checkpoint seen (same clock as core_tool_calls.ts)
    updated_at     timestamptz NOT NULL,   -- latest root checkpoint
    checkpoint_id  text        NOT NULL,   -- the latest root checkpoint
    step           integer,
    status         text        NOT NULL CHECK (status IN ('idle', 'interrupted', 'error')),
    agent          text,                   -- metadata `agente` (ours) or `graph_id` (Agent Server)
    metadata       jsonb       NOT NULL DEFAULT '{}',
    refreshed_at   timestamptz NOT NULL DEFAULT now()  -- real time the row was last written (status re-check)
);
-- interrupted: an `__interrupt__` write on the latest root checkpoint; error: an `__error__` write there
-- (a resumed or retried thread has a newer checkpoint, so it is idle again).
-- Ascending columns: a search sorts on (time, thread_id) both ways, which a forward or backward scan gives.
CREATE INDEX IF NOT EXISTS core_thread_summary_updated_idx ON core_thread_summary (updated_at, thread_id);
CREATE INDEX IF NOT EXISTS core_thread_summary_created_idx ON core_thread_summary (created_at, thread_id);
CREATE INDEX IF NOT EXISTS core_thread_summary_status_idx ON core_thread_summary (status, updated_at, thread_id)
    WHERE status <> 'idle';
CREATE INDEX IF NOT EXISTS core_thread_summary_agent_idx ON core_thread_summary (agent, updated_at, thread_id);
CREATE INDEX IF NOT EXISTS core_thread_summary_metadata_idx ON core_thread_summary USING gin (metadata jsonb_path_ops);
CREATE INDEX IF NOT EXISTS core_thread_summary_refreshed_idx ON core_thread_summary (refreshed_at);

-- One row per AI message that carries `usage_metadata` (one per message id and thread: a message repeated in a
-- later write is counted once). Tokens as LangChain reports them: input includes the cached (cache_read) ones.
CREATE TABLE IF NOT EXISTS core_message_usage (
    thread_id      text        NOT NULL,
    message_key    text        NOT NULL,   -- the message id, else where it was written
    checkpoint_ns  text        NOT NULL,
    checkpoint_id  text        NOT NULL,
    ts             timestamptz NOT NULL,
    clock          text        NOT NULL CHECK (clock IN ('checkpoint', 'replayed')),
    agent          text,
    cliente_id     text,
    model          text,                   -- response_metadata model_name / model / model_id
    input_tokens   bigint      NOT NULL,
    output_tokens  bigint      NOT NULL,
    cached_tokens  bigint      NOT NULL,
    PRIMARY KEY (thread_id, message_key)
);

-- Rollups of core_message_usage, incremented only by rows newly inserted there (re-reads add nothing): per thread
-- and model (the thread list, the page's per-thread figures) and per UTC day, agent and model (per agent, per day,
-- the exporter's metrics). agent '' = no agent named.
CREATE TABLE IF NOT EXISTS core_usage_threads (
    thread_id      text        NOT NULL,
    model          text        NOT NULL,   -- '' = no model named
    agent          text        NOT NULL,
    messages       bigint      NOT NULL,
    input_tokens   bigint      NOT NULL,
    output_tokens  bigint      NOT NULL,
    cached_tokens  bigint      NOT NULL,
    last_ts        timestamptz NOT NULL,
    PRIMARY KEY (thread_id, model)
);
CREATE TABLE IF NOT EXISTS core_usage_days (
    day            date        NOT NULL,
    agent          text        NOT NULL,
    model          text        NOT NULL,
    messages       bigint      NOT NULL,
    input_tokens   bigint      NOT NULL,
    output_tokens  bigint      NOT NULL,
    cached_tokens  bigint      NOT NULL,
    PRIMARY KEY (day, agent, model)
);

CREATE OR REPLACE FUNCTION core_try_bigint(value text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN value ~ '^\s*-?\d{1,18}\s*$' THEN value::bigint END
$$;

-- The AI messages with usage in a decoded payload: [{id, model, input, output, cached}], [] when none.
-- Plain expressions over the decoder's JSON (migration 005/052), nothing executed; a payload without
-- `usage_metadata` is left after one C-level test.
CREATE OR REPLACE FUNCTION core_message_usages(payload jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN payload @? 'strict $.**.usage_metadata' THEN coalesce((
        SELECT jsonb_agg(jsonb_build_object(
                   'id', v ->> 'id',
                   'model', coalesce(v -> 'response_metadata' ->> 'model_name', v -> 'response_metadata' ->> 'model',
                                     v -> 'response_metadata' ->> 'model_id'),
                   'input', coalesce(core_try_bigint(v -> 'usage_metadata' ->> 'input_tokens'), 0),
                   'output', coalesce(core_try_bigint(v -> 'usage_metadata' ->> 'output_tokens'), 0),
                   'cached', coalesce(core_try_bigint(v -> 'usage_metadata' -> 'input_token_details' ->> 'cache_read'), 0),
                   'position', ord - 1) ORDER BY ord)
        FROM jsonb_array_elements(CASE jsonb_typeof(payload) WHEN 'array' THEN payload
                                                              ELSE jsonb_build_array(payload) END)
             WITH ORDINALITY AS e(x, ord)
        CROSS JOIN LATERAL (SELECT CASE WHEN x ->> 'lc' = '1' THEN x -> 'kwargs' ELSE x -> 'value' END AS v) m
        WHERE jsonb_typeof(x) = 'object' AND jsonb_typeof(v) = 'object' AND v ->> 'type' IN ('ai', 'AIMessageChunk')
          AND jsonb_typeof(v -> 'usage_metadata') = 'object'), '[]'::jsonb)
    ELSE '[]'::jsonb END
$$;

REVOKE ALL ON FUNCTION core_message_usages(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION core_try_bigint(text) FROM PUBLIC;

-- A database upgraded to this migration has its history extracted already: rewind the extraction once, so the next
-- sweep (or `python -m core.operations.sweep_cli`) re-reads it and fills these tables. Idempotent for the tool calls
-- (primary keys); until it is done the pages say how many checkpoints are behind.
UPDATE core_extract_watermark SET ts = '', thread_id = '', checkpoint_ns = '', checkpoint_id = '', updated_at = now()
WHERE name = 'tool_calls' AND NOT EXISTS (SELECT 1 FROM core_thread_summary);
