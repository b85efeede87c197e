-- Repair of databases migrated with an earlier text of 005_msgpack_decoder.sql (issue 24): 005 was edited in
-- place three times the day it was written (the messages' decoder rewritten in PL/pgSQL with a jsonpath
-- pre-test, then made ~1.5x faster; COST declared on both functions so the planner evaluates cheap filters
-- first), and a database that had applied an earlier text kept its slower functions without a COST. The two
-- functions as 005 and 021 leave them today (021 made core_checkpoint_payload STABLE: it reads the
-- allowlist through the decoder); on a database migrated with today's texts this changes nothing.
CREATE OR REPLACE FUNCTION core_checkpoint_payload(blob_type text, blob bytea) RETURNS jsonb
LANGUAGE plpgsql STABLE PARALLEL SAFE COST 1000 AS $$
-- A checkpoint_blobs / checkpoint_writes (type, blob) pair as jsonb. Never raises (except on a
-- cancelled query): what cannot be decoded is {"undecodable": "<reason>", "blob_type", "size"}.
BEGIN
    IF blob_type = 'msgpack' THEN
        IF blob IS NULL THEN
            RETURN jsonb_build_object('undecodable', 'msgpack blob without bytes', 'blob_type', blob_type, 'size', 0);
        END IF;
        RETURN core_msgpack_to_json_text(blob)::jsonb;
    ELSIF blob_type = 'null' THEN
        RETURN 'null'::jsonb;
    ELSIF blob_type = 'empty' THEN                    -- a channel with no value at that version
        RETURN '{"type": "empty", "value": null}'::jsonb;
    ELSIF blob_type IN ('bytes', 'bytearray') THEN
        RETURN jsonb_build_object('type', 'bytes', 'value',
                                  translate(encode(coalesce(blob, ''::bytea), 'base64'), E'\n', ''));
    ELSIF blob_type = 'json' THEN                     -- old payloads: lc:2 constructors stay plain JSON
        RETURN convert_from(blob, 'UTF8')::jsonb;
    ELSE
        RETURN jsonb_build_object('undecodable', format('blob type %s is never decoded here', coalesce(blob_type, 'NULL')),
                                  'blob_type', blob_type, 'size', coalesce(octet_length(blob), 0));
    END IF;
EXCEPTION WHEN OTHERS THEN
    RETURN jsonb_build_object('undecodable', SQLERRM, 'blob_type', blob_type, 'size', coalesce(octet_length(blob), 0));
END
$$;
COMMENT ON FUNCTION core_checkpoint_payload(text, bytea) IS
    'A checkpoint (type, blob) pair decoded to jsonb without executing anything; never raises: undecodable blobs give {"undecodable": reason}.';

CREATE OR REPLACE FUNCTION core_checkpoint_messages(payload jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE COST 200 AS $$
-- The chat messages in a decoded payload (one message or a list of them), each reduced to
-- {kind, id, content, tool_calls, tool_name, tool_call_id, status}; [] when there are none.
-- kind: human / ai / tool / system / remove. Recognised: langchain message objects (msgpack ext),
-- plain {"role", "content"} dicts (what a caller passes as input) and old lc:1 JSON constructors.
-- Plain PL/pgSQL expressions only (no queries): it runs once per write in the views.
DECLARE
    items  jsonb;
    x      jsonb;
    v      jsonb;
    kind   text;
    calls  jsonb;
    names  text;
    result jsonb[] := '{}';
    i      integer;
    j      integer;
BEGIN
    IF jsonb_typeof(payload) = 'array' THEN
        items := payload;
    ELSIF jsonb_typeof(payload) = 'object' THEN
        items := jsonb_build_array(payload);
    ELSE
        RETURN '[]'::jsonb;
    END IF;
    -- most writes hold no message at all: one C-level test before looking at each element
    IF NOT items @? 'lax $ ? (@.type starts with "langchain_core.messages." || exists(@.role) || @.lc == 1)' THEN
        RETURN '[]'::jsonb;
    END IF;
    FOR i IN 0 .. jsonb_array_length(items) - 1 LOOP
        x := items -> i;
        v := NULL;
        kind := NULL;
        IF jsonb_typeof(x) <> 'object' THEN
            CONTINUE;
        ELSIF x ->> 'type' LIKE 'langchain\_core.messages.%' AND jsonb_typeof(x -> 'value') = 'object' THEN
            v := x -> 'value';
            kind := v ->> 'type';
            IF kind LIKE '%Chunk' THEN
                kind := lower(replace(replace(kind, 'MessageChunk', ''), 'AI', 'ai'));
            END IF;
        ELSIF x ->> 'lc' = '1' AND x ->> 'type' = 'constructor' AND x -> 'id' ->> -1 LIKE '%Message%' THEN
            v := x -> 'kwargs';
            kind := coalesce(v ->> 'type', lower(replace(x -> 'id' ->> -1, 'Message', '')));
        ELSIF x ? 'role' AND x ? 'content' THEN
            v := x;
            kind := CASE x ->> 'role' WHEN 'user' THEN 'human' WHEN 'assistant' THEN 'ai' ELSE x ->> 'role' END;
        END IF;
        IF v IS NULL OR kind IS NULL OR jsonb_typeof(v) <> 'object' THEN
            CONTINUE;
        END IF;
        calls := CASE WHEN jsonb_typeof(v -> 'tool_calls') = 'array' AND jsonb_array_length(v -> 'tool_calls') > 0
                      THEN v -> 'tool_calls' END;
        names := NULL;
        IF kind = 'tool' THEN
            names := v ->> 'name';
        ELSIF calls IS NOT NULL THEN
            FOR j IN 0 .. jsonb_array_length(calls) - 1 LOOP
                names := concat_ws(',', names, calls -> j ->> 'name');
            END LOOP;
        END IF;
        result := array_append(result, jsonb_strip_nulls(jsonb_build_object(
            'kind', kind, 'id', v ->> 'id', 'content', v -> 'content', 'tool_calls', calls, 'tool_name', names,
            'tool_call_id', v ->> 'tool_call_id', 'status', v ->> 'status')));
    END LOOP;
    RETURN to_jsonb(result);
END
$$;
