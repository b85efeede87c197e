-- Issue 43: a thread where only some AI messages carry `usage_metadata` was shown with the tokens of those only and
-- no note. The extraction (core/checkpoints/tool_calls.py) now also keeps the AI messages WITHOUT usage, once per
-- message and thread, so that the Tokens and cost view says "partial" for such a thread (core/checkpoints/usage.py).

CREATE TABLE IF NOT EXISTS core_message_no_usage (
    thread_id      text        NOT NULL,
    message_key    text        NOT NULL,   -- the message id, else where it was written (as core_message_usage)
    PRIMARY KEY (thread_id, message_key)
);

-- The AI messages without usage in a decoded payload: [{id, position}], [] when none (as core_message_usages; a
-- payload without an AI message is left after one C-level test).
CREATE OR REPLACE FUNCTION core_message_no_usages(payload jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN payload @? 'lax $[*].*.type ? (@ == "ai" || @ == "AIMessageChunk")' THEN coalesce((
        SELECT jsonb_agg(jsonb_build_object('id', v ->> 'id', 'position', ord - 1) ORDER BY ord)
        FROM jsonb_array_elements(CASE jsonb_typeof(payload) WHEN 'array' THEN payload
                                                              ELSE jsonb_build_array(payload) END)
             WITH ORDINALITY AS e(x, ord)
        CROSS JOIN LATERAL (SELECT CASE WHEN x ->> 'lc' = '1' THEN x -> 'kwargs' ELSE x -> 'value' END AS v) m
        WHERE jsonb_typeof(x) = 'object' AND jsonb_typeof(v) = 'object' AND v ->> 'type' IN ('ai', 'AIMessageChunk')
          AND jsonb_typeof(v -> 'usage_metadata') IS DISTINCT FROM 'object'), '[]'::jsonb)
    ELSE '[]'::jsonb END
$$;

REVOKE ALL ON FUNCTION core_message_no_usages(jsonb) FROM PUBLIC;
