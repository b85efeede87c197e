-- A msgpack decoder in plain PL/pgSQL (no compiled extension) and the canonical checkpoint views.
--
-- langgraph stores checkpoint values (`checkpoint_blobs`) and pending writes (`checkpoint_writes`)
-- as (type, bytes) pairs; type `msgpack` is msgpack where every Python object langgraph could not
-- encode natively is an *ext* value whose payload is itself msgpack `[module, name, arg(s)(, method)]`
-- (langgraph/checkpoint/serde/jsonplus.py). Loading that in Python imports `module` and calls
-- `name`; decoding it here never does: each constructed object becomes plain JSON
--     {"type": "module.Name", "value": <its argument(s), decoded>}          ext 0, 1, 2, 4, 5
--     {"type": "module.Name", "value": <arg>, "method": "fromisoformat"}  ext 3 (a method call)
--     {"type": "numpy.ndarray", "value": [dtype, shape, order, <bytes>]}  ext 6
--     {"type": "langgraph.checkpoint.serde.types._DeltaSnapshot", "value": ...}   ext 7
--     {"type": "msgpack.ext", "code": n, "value": "<base64>"}              any other ext code
-- and msgpack `bin` becomes {"type": "bytes", "value": "<base64>"}. NaN and infinities (not JSON)
-- become the strings "NaN", "Infinity", "-Infinity"; non-string map keys (ints, booleans, nil,
-- floats) become their JSON text as a string key, the way Python's json.dumps writes them.
--
-- The decoder walks the bytes once with a position and an explicit stack (no recursion, no bytea
-- slicing except to read a string's or a bin's own bytes), emitting JSON text that is parsed into
-- jsonb once at the end. Floats are printed with PostgreSQL's shortest round-trip output, which
-- needs extra_float_digits > 0 (the default, 1).

CREATE OR REPLACE FUNCTION core_msgpack_str_at(buf bytea, pos integer, OUT value text, OUT next_pos integer)
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
-- The msgpack str starting at byte `pos` (0-based) of `buf`, and the position after it.
DECLARE
    n   integer := octet_length(buf);
    b   integer;
    len bigint;
BEGIN
    IF pos >= n THEN
        RAISE EXCEPTION 'truncated: expected a string at byte %', pos;
    END IF;
    b := get_byte(buf, pos);
    IF b BETWEEN 160 AND 191 THEN                  -- fixstr
        len := b - 160; pos := pos + 1;
    ELSIF b = 217 AND pos + 2 <= n THEN            -- str 8
        len := get_byte(buf, pos + 1); pos := pos + 2;
    ELSIF b = 218 AND pos + 3 <= n THEN            -- str 16
        len := (get_byte(buf, pos + 1) << 8) | get_byte(buf, pos + 2); pos := pos + 3;
    ELSIF b = 219 AND pos + 5 <= n THEN            -- str 32
        len := (get_byte(buf, pos + 1)::bigint << 24) | (get_byte(buf, pos + 2) << 16)
             | (get_byte(buf, pos + 3) << 8) | get_byte(buf, pos + 4);
        pos := pos + 5;
    ELSE
        RAISE EXCEPTION 'expected a string at byte %, found 0x%', pos, to_hex(b);
    END IF;
    IF pos + len > n THEN
        RAISE EXCEPTION 'truncated: string of % bytes at byte %', len, pos;
    END IF;
    value := convert_from(substring(buf FROM pos + 1 FOR len::integer), 'UTF8');
    next_pos := pos + len::integer;
END
$$;

CREATE OR REPLACE FUNCTION core_msgpack_to_json_text(buf bytea) RETURNS text
-- COST: ~20-30 us a payload, ~1000x a plain operator, so the planner evaluates cheap filters first
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE COST 1000 AS $$
-- JSON text of the single msgpack value in `buf`; raises on malformed input (truncation, trailing
-- bytes, invalid UTF-8, a container or bin used as a map key, an ext payload of the wrong shape).
DECLARE
    n      integer := octet_length(buf);
    pos    integer := 0;          -- 0-based position of the next byte to read
    b      integer;
    len    bigint;                -- length of a str/bin/ext payload, or a container's item count
    out    text := '';            -- JSON being written; flushed into parts every ~1 kB
    parts  text[] := '{}';
    piece  text;
    -- the stack of open containers: kind 1 array, 2 map, 3 langgraph constructor ext, 4 other ext;
    -- the innermost one lives in the t_* scalars (read at every item), the ones around it in s_*[]
    depth  integer := 0;
    t_kind integer := 0;          -- 0: no container open (the top-level value)
    t_left bigint := 0;
    t_end  integer := 0;
    t_code integer := 0;
    s_kind integer[] := '{}';
    s_left bigint[] := '{}';      -- items still to read (a map counts keys and values)
    s_end  integer[] := '{}';     -- ext: position where its payload ends
    s_code integer[] := '{}';     -- ext: code * 16 + number of elements of its [module, name, ...]
    ext    integer;
    stop   integer;
    str    record;
    cnt    integer;
    modname text;
    clsname text;
    hi     bigint;
    lo     bigint;
    e      integer;
    m      bigint;
    f      double precision;
BEGIN
    LOOP
        IF pos >= n THEN
            RAISE EXCEPTION 'truncated: expected a value at byte %', pos;
        END IF;
        b := get_byte(buf, pos);
        -- every branch sets piece: a complete scalar, or NULL when it opened a container or an ext
        IF b BETWEEN 160 AND 191 OR b BETWEEN 217 AND 219 THEN   -- str (inline and first: the commonest item)
            IF b < 192 THEN len := b - 160; pos := pos + 1;
            ELSE
                cnt := 1 << (b - 217);
                IF pos + 1 + cnt > n THEN RAISE EXCEPTION 'truncated: str header at byte %', pos; END IF;
                IF cnt = 1 THEN len := get_byte(buf, pos + 1);
                ELSIF cnt = 2 THEN len := (get_byte(buf, pos + 1) << 8) | get_byte(buf, pos + 2);
                ELSE len := (get_byte(buf, pos + 1)::bigint << 24) | (get_byte(buf, pos + 2) << 16)
                          | (get_byte(buf, pos + 3) << 8) | get_byte(buf, pos + 4);
                END IF;
                pos := pos + 1 + cnt;
            END IF;
            IF pos + len > n THEN RAISE EXCEPTION 'truncated: str of % bytes at byte %', len, pos; END IF;
            piece := to_json(convert_from(substring(buf FROM pos + 1 FOR len::integer), 'UTF8'))::text;
            pos := pos + len::integer;
        ELSIF b < 128 THEN                                -- positive fixint
            piece := b::text; pos := pos + 1;
        ELSIF b >= 224 THEN                               -- negative fixint
            piece := (b - 256)::text; pos := pos + 1;
        ELSIF b BETWEEN 128 AND 159 OR b BETWEEN 220 AND 223 THEN   -- map / array
            IF t_kind = 2 AND t_left % 2 = 0 THEN
                RAISE EXCEPTION 'a container used as a map key at byte %', pos;
            END IF;
            piece := NULL;
            IF b < 144 THEN len := b - 128; pos := pos + 1;              -- fixmap
            ELSIF b < 160 THEN len := b - 144; pos := pos + 1;           -- fixarray
            ELSIF b IN (220, 222) THEN                                   -- array 16 / map 16
                IF pos + 3 > n THEN RAISE EXCEPTION 'truncated: header at byte %', pos; END IF;
                len := (get_byte(buf, pos + 1) << 8) | get_byte(buf, pos + 2); pos := pos + 3;
            ELSE                                                         -- array 32 / map 32
                IF pos + 5 > n THEN RAISE EXCEPTION 'truncated: header at byte %', pos; END IF;
                len := (get_byte(buf, pos + 1)::bigint << 24) | (get_byte(buf, pos + 2) << 16)
                     | (get_byte(buf, pos + 3) << 8) | get_byte(buf, pos + 4);
                pos := pos + 5;
            END IF;
            IF b < 144 OR b IN (222, 223) THEN                           -- a map
                IF len = 0 THEN piece := '{}';
                ELSE
                    out := out || '{';
                    depth := depth + 1; s_kind[depth] := t_kind; s_left[depth] := t_left; s_end[depth] := t_end; s_code[depth] := t_code;
                    t_kind := 2; t_left := 2 * len;
                END IF;
            ELSE
                IF len = 0 THEN piece := '[]';
                ELSE
                    out := out || '[';
                    depth := depth + 1; s_kind[depth] := t_kind; s_left[depth] := t_left; s_end[depth] := t_end; s_code[depth] := t_code;
                    t_kind := 1; t_left := len;
                END IF;
            END IF;
        ELSIF b = 192 THEN piece := 'null'; pos := pos + 1;
        ELSIF b = 194 THEN piece := 'false'; pos := pos + 1;
        ELSIF b = 195 THEN piece := 'true'; pos := pos + 1;
        ELSIF b BETWEEN 204 AND 211 THEN                  -- uint 8..64, int 8..64
            cnt := 1 << ((b - 204) % 4);                  -- payload bytes: 1, 2, 4, 8
            IF pos + 1 + cnt > n THEN RAISE EXCEPTION 'truncated: integer at byte %', pos; END IF;
            IF cnt = 1 THEN
                hi := get_byte(buf, pos + 1);
                IF b = 208 AND hi >= 128 THEN hi := hi - 256; END IF;
                piece := hi::text;
            ELSIF cnt = 2 THEN
                hi := (get_byte(buf, pos + 1) << 8) | get_byte(buf, pos + 2);
                IF b = 209 AND hi >= 32768 THEN hi := hi - 65536; END IF;
                piece := hi::text;
            ELSIF cnt = 4 THEN
                hi := (get_byte(buf, pos + 1)::bigint << 24) | (get_byte(buf, pos + 2) << 16)
                    | (get_byte(buf, pos + 3) << 8) | get_byte(buf, pos + 4);
                IF b = 210 AND hi >= 2147483648 THEN hi := hi - 4294967296; END IF;
                piece := hi::text;
            ELSE
                hi := (get_byte(buf, pos + 1)::bigint << 24) | (get_byte(buf, pos + 2) << 16)
                    | (get_byte(buf, pos + 3) << 8) | get_byte(buf, pos + 4);
                lo := (get_byte(buf, pos + 5)::bigint << 24) | (get_byte(buf, pos + 6) << 16)
                    | (get_byte(buf, pos + 7) << 8) | get_byte(buf, pos + 8);
                IF b = 207 THEN                           -- uint 64 may exceed bigint
                    piece := (hi::numeric * 4294967296 + lo)::text;
                ELSE                                      -- int 64: two's complement via the shift
                    piece := ((hi << 32) | lo)::text;
                END IF;
            END IF;
            pos := pos + 1 + cnt;
        ELSIF b = 202 OR b = 203 THEN                     -- float 32 / float 64
            piece := NULL;                                -- set below only for NaN / infinities
            IF pos + (CASE b WHEN 202 THEN 5 ELSE 9 END) > n THEN
                RAISE EXCEPTION 'truncated: float at byte %', pos;
            END IF;
            hi := (get_byte(buf, pos + 1)::bigint << 24) | (get_byte(buf, pos + 2) << 16)
                | (get_byte(buf, pos + 3) << 8) | get_byte(buf, pos + 4);
            IF b = 202 THEN
                e := ((hi >> 23) & 255)::integer;
                m := hi & 8388607;
                IF e = 255 THEN
                    piece := CASE WHEN m <> 0 THEN '"NaN"' WHEN hi >> 31 = 1 THEN '"-Infinity"' ELSE '"Infinity"' END;
                ELSIF e = 0 THEN f := m * (2::double precision ^ -149);
                ELSE f := (m + 8388608) * (2::double precision ^ (e - 150));
                END IF;
                pos := pos + 5;
            ELSE
                lo := (get_byte(buf, pos + 5)::bigint << 24) | (get_byte(buf, pos + 6) << 16)
                    | (get_byte(buf, pos + 7) << 8) | get_byte(buf, pos + 8);
                e := ((hi >> 20) & 2047)::integer;
                m := ((hi & 1048575) << 32) | lo;
                IF e = 2047 THEN
                    piece := CASE WHEN m <> 0 THEN '"NaN"' WHEN hi >> 31 = 1 THEN '"-Infinity"' ELSE '"Infinity"' END;
                ELSIF e = 0 THEN f := m * (2::double precision ^ -1074);
                ELSE f := (m + 4503599627370496) * (2::double precision ^ (e - 1075));
                END IF;
                pos := pos + 9;
            END IF;
            IF piece IS NULL THEN
                IF hi >> 31 = 1 THEN f := -f; END IF;
                piece := f::text;
            END IF;
        ELSIF b BETWEEN 196 AND 198 THEN                  -- bin 8 / 16 / 32
            IF t_kind = 2 AND t_left % 2 = 0 THEN RAISE EXCEPTION 'bytes used as a map key at byte %', pos; END IF;
            cnt := 1 << (b - 196);
            IF pos + 1 + cnt > n THEN RAISE EXCEPTION 'truncated: bin header at byte %', pos; END IF;
            IF cnt = 1 THEN len := get_byte(buf, pos + 1);
            ELSIF cnt = 2 THEN len := (get_byte(buf, pos + 1) << 8) | get_byte(buf, pos + 2);
            ELSE len := (get_byte(buf, pos + 1)::bigint << 24) | (get_byte(buf, pos + 2) << 16)
                      | (get_byte(buf, pos + 3) << 8) | get_byte(buf, pos + 4);
            END IF;
            pos := pos + 1 + cnt;
            IF pos + len > n THEN RAISE EXCEPTION 'truncated: bin of % bytes at byte %', len, pos; END IF;
            piece := '{"type":"bytes","value":"'
                  || translate(encode(substring(buf FROM pos + 1 FOR len::integer), 'base64'), E'\n', '') || '"}';
            pos := pos + len::integer;
        ELSIF b BETWEEN 199 AND 201 OR b BETWEEN 212 AND 216 THEN   -- ext 8/16/32, fixext 1..16
            IF t_kind = 2 AND t_left % 2 = 0 THEN RAISE EXCEPTION 'an ext value used as a map key at byte %', pos; END IF;
            piece := NULL;
            IF b >= 212 THEN
                len := 1 << (b - 212); pos := pos + 1;
            ELSE
                cnt := 1 << (b - 199);
                IF pos + 1 + cnt > n THEN RAISE EXCEPTION 'truncated: ext header at byte %', pos; END IF;
                IF cnt = 1 THEN len := get_byte(buf, pos + 1);
                ELSIF cnt = 2 THEN len := (get_byte(buf, pos + 1) << 8) | get_byte(buf, pos + 2);
                ELSE len := (get_byte(buf, pos + 1)::bigint << 24) | (get_byte(buf, pos + 2) << 16)
                          | (get_byte(buf, pos + 3) << 8) | get_byte(buf, pos + 4);
                END IF;
                pos := pos + 1 + cnt;
            END IF;
            IF pos + 1 + len > n THEN RAISE EXCEPTION 'truncated: ext of % bytes at byte %', len, pos; END IF;
            ext := get_byte(buf, pos);
            IF ext >= 128 THEN ext := ext - 256; END IF;
            pos := pos + 1;
            stop := pos + len::integer;                   -- where the ext payload ends
            IF ext BETWEEN 0 AND 5 THEN
                -- langgraph constructor: [module, name, arg(s)] or [module, name, arg, method]
                b := CASE WHEN pos < stop THEN get_byte(buf, pos) ELSE 0 END;
                IF b BETWEEN 144 AND 159 THEN cnt := b - 144; pos := pos + 1;
                ELSIF b = 220 AND pos + 3 <= stop THEN
                    cnt := (get_byte(buf, pos + 1) << 8) | get_byte(buf, pos + 2); pos := pos + 3;
                ELSE
                    RAISE EXCEPTION 'ext % at byte % does not hold a [module, name, ...] array', ext, pos;
                END IF;
                IF cnt NOT IN (3, 4) THEN
                    RAISE EXCEPTION 'ext % at byte % holds % elements, expected 3 or 4', ext, pos, cnt;
                END IF;
                depth := depth + 1; s_kind[depth] := t_kind; s_left[depth] := t_left; s_end[depth] := t_end; s_code[depth] := t_code;
                t_kind := 3; t_left := 1; t_end := stop; t_code := ext * 16 + cnt;
                str := core_msgpack_str_at(buf, pos); modname := str.value; pos := str.next_pos;
                str := core_msgpack_str_at(buf, pos); clsname := str.value; pos := str.next_pos;
                out := out || '{"type":' || to_json(modname || '.' || clsname)::text || ',"value":';
            ELSIF ext IN (6, 7) THEN                      -- numpy array / delta snapshot: payload as is
                depth := depth + 1; s_kind[depth] := t_kind; s_left[depth] := t_left; s_end[depth] := t_end; s_code[depth] := t_code;
                t_kind := 4; t_left := 1; t_end := stop; t_code := ext * 16;
                out := out || CASE ext WHEN 6 THEN '{"type":"numpy.ndarray","value":'
                                       ELSE '{"type":"langgraph.checkpoint.serde.types._DeltaSnapshot","value":' END;
            ELSE                                          -- an ext langgraph never writes: keep its bytes
                piece := '{"type":"msgpack.ext","code":' || ext || ',"value":"'
                      || translate(encode(substring(buf FROM pos + 1 FOR len::integer), 'base64'), E'\n', '') || '"}';
                pos := pos + len::integer;
            END IF;
        ELSE                                              -- 0xc1 is never used
            RAISE EXCEPTION 'invalid msgpack byte 0x% at byte %', to_hex(b), pos;
        END IF;

        IF piece IS NOT NULL THEN
            IF t_kind = 2 AND t_left % 2 = 0 AND left(piece, 1) <> '"' THEN
                piece := to_json(piece)::text;            -- 1 -> "1", true -> "true", null -> "null"
            END IF;
            -- the value is complete: close every container it completes (closers gather in piece,
            -- so `out`, which every append copies, grows once per item)
            LOOP
                IF t_kind = 0 THEN
                    IF pos <> n THEN
                        RAISE EXCEPTION 'trailing bytes: the value ends at byte % of %', pos, n;
                    END IF;
                    RETURN array_to_string(parts, '') || out || piece;
                END IF;
                t_left := t_left - 1;
                IF t_left > 0 THEN
                    out := out || piece || CASE WHEN t_kind = 2 AND t_left % 2 = 1 THEN ':' ELSE ',' END;
                    EXIT;
                END IF;
                IF t_kind = 1 THEN
                    piece := piece || ']';
                ELSIF t_kind = 2 THEN
                    piece := piece || '}';
                ELSE
                    IF t_kind = 3 AND t_code % 16 = 4 THEN
                        str := core_msgpack_str_at(buf, pos); modname := str.value; pos := str.next_pos;
                        IF t_code / 16 = 3 THEN
                            piece := piece || ',"method":' || to_json(modname)::text;
                        END IF;
                    END IF;
                    IF pos <> t_end THEN
                        RAISE EXCEPTION 'ext % payload ends at byte %, its value at byte %', t_code / 16, t_end, pos;
                    END IF;
                    piece := piece || '}';
                END IF;
                t_kind := s_kind[depth]; t_left := s_left[depth]; t_end := s_end[depth]; t_code := s_code[depth];
                depth := depth - 1;
            END LOOP;
            IF octet_length(out) > 1024 THEN              -- keeps appends O(1) on large payloads
                parts := array_append(parts, out);
                out := '';
            END IF;
        END IF;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION core_msgpack_decode(buf bytea) RETURNS jsonb
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT core_msgpack_to_json_text(buf)::jsonb
$$;
COMMENT ON FUNCTION core_msgpack_decode(bytea) IS
    'msgpack -> jsonb without executing anything; langgraph ext objects become {"type": "module.Name", "value": ...}. Raises on malformed input: use core_checkpoint_payload in queries.';

CREATE OR REPLACE FUNCTION core_checkpoint_payload(blob_type text, blob bytea) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE COST 1000 AS $$
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

-- ---------------------------------------------------------------------------------------------
-- Helpers of the views (all plain SQL or PL/pgSQL, none can raise on a row's content).

CREATE OR REPLACE FUNCTION core_try_timestamptz(value text) RETURNS timestamptz
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
-- checkpoint->>'ts' as a timestamp; NULL (not an error) when it is missing or not a timestamp.
BEGIN
    IF value IS NULL OR value !~ '^\d{4}-\d\d-\d\d[T ]\d\d:\d\d' THEN
        RETURN NULL;
    END IF;
    RETURN value::timestamptz;
EXCEPTION WHEN OTHERS THEN
    RETURN NULL;
END
$$;

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

-- ---------------------------------------------------------------------------------------------
-- Canonical views. Every decoded column is computed only when a query selects it.

CREATE OR REPLACE VIEW core_checkpoints_view AS
SELECT c.thread_id,
       c.checkpoint_ns,
       c.checkpoint_id,
       c.parent_checkpoint_id,
       core_try_timestamptz(c.checkpoint ->> 'ts')                             AS ts,
       CASE WHEN c.metadata ->> 'step' ~ '^-?\d{1,9}$' THEN (c.metadata ->> 'step')::integer END AS step,
       c.metadata ->> 'source'                                                 AS source,
       c.metadata ->> 'cliente_id'                                             AS cliente_id,
       c.metadata ->> 'proveedor_id'                                           AS proveedor_id,
       c.metadata ->> 'empleado_id'                                            AS empleado_id,
       c.metadata ->> 'agente'                                                 AS agente,
       c.metadata,
       c.checkpoint -> 'channel_versions'                                      AS channel_versions,
       c.checkpoint -> 'updated_channels'                                      AS updated_channels,
       pg_column_size(c.checkpoint) + pg_column_size(c.metadata)               AS checkpoint_bytes,
       -- every channel's value at this checkpoint: inline primitives plus the decoded blobs
       (SELECT coalesce(jsonb_object_agg(b.channel, core_checkpoint_payload(b.type, b.blob)), '{}'::jsonb)
        FROM jsonb_each_text(CASE WHEN jsonb_typeof(c.checkpoint -> 'channel_versions') = 'object'
                                  THEN c.checkpoint -> 'channel_versions' ELSE '{}' END) AS v(channel, version)
        JOIN checkpoint_blobs b
          ON b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
         AND b.channel = v.channel AND b.version = v.version
        WHERE b.type <> 'empty')
       || CASE WHEN jsonb_typeof(c.checkpoint -> 'channel_values') = 'object'
               THEN c.checkpoint -> 'channel_values' ELSE '{}'::jsonb END       AS channel_values,
       (SELECT count(*) FROM checkpoint_writes w
        WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
          AND w.checkpoint_id = c.checkpoint_id)                                AS pending_writes,
       (SELECT coalesce(sum(octet_length(w.blob)), 0) FROM checkpoint_writes w
        WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
          AND w.checkpoint_id = c.checkpoint_id)                                AS pending_write_bytes
FROM checkpoints c;
COMMENT ON VIEW core_checkpoints_view IS
    'One row per checkpoint: thread, namespace, id, parent, ts, step, source, customer, metadata, decoded channel values.';

CREATE OR REPLACE VIEW core_checkpoint_writes_view AS
SELECT w.thread_id,
       w.checkpoint_ns,
       w.checkpoint_id,
       w.task_id,
       w.task_path,
       w.idx,
       w.channel,
       w.type                                                                  AS blob_type,
       octet_length(w.blob)                                                    AS size_bytes,
       c.ts,
       c.step,
       c.source,
       c.cliente_id,
       c.agente,
       d.payload,
       CASE WHEN jsonb_typeof(d.payload) = 'object' AND d.payload ? 'undecodable' AND d.payload ? 'blob_type'
            THEN d.payload ->> 'undecodable' END                              AS undecodable,
       d.messages,
       (SELECT string_agg(k #>> '{}', ',') FROM jsonb_path_query(d.messages, '$[*].kind') k)      AS message_kind,
       nullif(jsonb_path_query_array(d.messages, '$[*].tool_calls[*]'), '[]')          AS tool_calls,
       (SELECT string_agg(k #>> '{}', ',') FROM jsonb_path_query(d.messages, '$[*].tool_name') k) AS tool_name
FROM checkpoint_writes w
LEFT JOIN core_checkpoints_view c
       ON c.thread_id = w.thread_id AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id
-- OFFSET 0 keeps each decode to one call per row however many columns use it
CROSS JOIN LATERAL (
    SELECT p.payload, core_checkpoint_messages(p.payload) AS messages
    FROM (SELECT core_checkpoint_payload(w.type, w.blob) AS payload OFFSET 0) p
    OFFSET 0
) d;
COMMENT ON VIEW core_checkpoint_writes_view IS
    'One row per pending write: task, channel, size, decoded payload, and for chat messages their kind, tool calls and tool name.';

CREATE OR REPLACE VIEW core_checkpoint_messages_view AS
SELECT w.thread_id, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.task_path, w.idx, w.channel,
       w.ts, w.step, w.cliente_id, w.agente,
       m.ord::integer                 AS position,
       m.msg ->> 'kind'               AS kind,
       m.msg ->> 'id'                 AS message_id,
       m.msg -> 'content'             AS content,
       m.msg -> 'tool_calls'          AS tool_calls,
       m.msg ->> 'tool_name'          AS tool_name,
       m.msg ->> 'tool_call_id'       AS tool_call_id,
       m.msg ->> 'status'             AS status
FROM core_checkpoint_writes_view w
CROSS JOIN LATERAL jsonb_array_elements(w.messages) WITH ORDINALITY AS m(msg, ord);
COMMENT ON VIEW core_checkpoint_messages_view IS
    'One row per chat message written to a thread (human / ai / tool / system), with tool calls and tool names.';
