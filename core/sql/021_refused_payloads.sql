-- Foreign payloads visible in SQL (issue 10, item 5). The serializer refuses to load a payload whose
-- msgpack constructor ext names a (module, name) outside its allowlist, or whose method ext names a
-- (module, name, method) outside langgraph's safe methods; the SQL decoder of 005 showed such a payload
-- as an ordinary {"type": "os.system", ...} value. Now the decoder marks it "refused": true and the views
-- have a `refused_type` column (the first refused type found, NULL when none).
--
-- The allowlist has ONE source, core/checkpoints/serde.py (ALLOWED_MSGPACK_MODULES plus langgraph's
-- SAFE_MSGPACK_TYPES and SAFE_MSGPACK_METHODS): `python -m core.migrate` rewrites core_serde_allowlist
-- from it on every run (core.migrate.sync_serde_allowlist), and tests/test_refused_payloads.py fails if
-- the table and the serializer ever differ. Until the runner has filled it, every constructor is refused.

CREATE TABLE IF NOT EXISTS core_serde_allowlist (
    module  text NOT NULL,
    name    text NOT NULL,
    method  text NOT NULL DEFAULT '',   -- '' for a constructor; the method name for a method ext (3)
    source  text NOT NULL,              -- core (our ALLOWED_MSGPACK_MODULES) or langgraph (its SAFE_* sets)
    PRIMARY KEY (module, name, method)
);

-- Payloads the SQL decoder marks refused, found by the incremental extraction
-- (core/checkpoints/tool_calls.py): the Degradation page counts them next to the serializer's refusals.
CREATE TABLE IF NOT EXISTS core_refused_payloads (
    thread_id      text        NOT NULL,
    checkpoint_ns  text        NOT NULL,
    checkpoint_id  text        NOT NULL,   -- a write's checkpoint; for a blob, the checkpoint that updated it
    kind           text        NOT NULL CHECK (kind IN ('write', 'blob')),
    item           text        NOT NULL,   -- write: task_id/idx; blob: channel/version
    channel        text,
    refused_type   text        NOT NULL,
    found_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, kind, item)
);

CREATE OR REPLACE FUNCTION core_msgpack_to_json_text(buf bytea) RETURNS text
-- COST: ~20-30 us a payload, ~1000x a plain operator, so the planner evaluates cheap filters first
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE COST 1000 AS $$
-- JSON text of the single msgpack value in `buf`; raises on malformed input (truncation, trailing
-- bytes, invalid UTF-8, a container or bin used as a map key, an ext payload of the wrong shape).
-- Migration 021: a constructor ext (0-2, 4, 5) naming a (module, name) outside core_serde_allowlist, or a
-- method ext (3) naming a (module, name, method) outside it, gets "refused": true, as the serializer
-- would refuse to load it. STABLE: it reads the allowlist (once per call, at the first ext).
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
    t_name text := '';            -- ext: its module:name (a method ext is checked when it closes)
    s_name text[] := '{}';
    allow  text[];                -- core_serde_allowlist as module:name and module:name:method
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
                s_name[depth] := t_name;
                t_kind := 3; t_left := 1; t_end := stop; t_code := ext * 16 + cnt;
                str := core_msgpack_str_at(buf, pos); modname := str.value; pos := str.next_pos;
                str := core_msgpack_str_at(buf, pos); clsname := str.value; pos := str.next_pos;
                t_name := modname || ':' || clsname;
                IF allow IS NULL THEN
                    SELECT coalesce(array_agg(a.module || ':' || a.name || CASE WHEN a.method = '' THEN '' ELSE ':' || a.method END), '{}')
                    INTO allow FROM core_serde_allowlist a;
                END IF;
                out := out || '{"type":' || to_json(modname || '.' || clsname)::text
                    || CASE WHEN ext <> 3 AND NOT t_name = ANY(allow) THEN ',"refused":true' ELSE '' END || ',"value":';
            ELSIF ext IN (6, 7) THEN                      -- numpy array / delta snapshot: payload as is
                depth := depth + 1; s_kind[depth] := t_kind; s_left[depth] := t_left; s_end[depth] := t_end; s_code[depth] := t_code;
                s_name[depth] := t_name;
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
                    IF t_kind = 3 AND t_code / 16 = 3
                       AND NOT (t_name || ':' || CASE WHEN t_code % 16 = 4 THEN modname ELSE '' END) = ANY(allow) THEN
                        piece := piece || ',"refused":true';  -- a method call outside the allowlist
                    END IF;
                    IF pos <> t_end THEN
                        RAISE EXCEPTION 'ext % payload ends at byte %, its value at byte %', t_code / 16, t_end, pos;
                    END IF;
                    piece := piece || '}';
                END IF;
                t_kind := s_kind[depth]; t_left := s_left[depth]; t_end := s_end[depth]; t_code := s_code[depth];
                t_name := s_name[depth];
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
LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT core_msgpack_to_json_text(buf)::jsonb
$$;

-- 005's core_checkpoint_payload, STABLE now (it calls the decoder, which reads the allowlist).
ALTER FUNCTION core_checkpoint_payload(text, bytea) STABLE;

CREATE OR REPLACE FUNCTION core_refused_type(payload jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    -- the first object the decoder marked refused, as module.Name (module.Name.method for a method call)
    SELECT CASE WHEN r ? 'method' THEN (r ->> 'type') || '.' || (r ->> 'method') ELSE r ->> 'type' END
    FROM jsonb_path_query_first(payload, 'lax $.** ? (@.refused == true)') AS r
$$;
COMMENT ON FUNCTION core_refused_type(jsonb) IS
    'The first type in a decoded payload that the serializer allowlist refuses (module.Name, or module.Name.method), NULL when none.';

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
          AND w.checkpoint_id = c.checkpoint_id)                                AS pending_write_bytes,
       -- the first type the serializer would refuse among this checkpoint's channel values
       (SELECT x.refused
        FROM jsonb_each_text(CASE WHEN jsonb_typeof(c.checkpoint -> 'channel_versions') = 'object'
                                  THEN c.checkpoint -> 'channel_versions' ELSE '{}' END) AS v(channel, version)
        JOIN checkpoint_blobs b
          ON b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
         AND b.channel = v.channel AND b.version = v.version
        CROSS JOIN LATERAL (SELECT core_refused_type(core_checkpoint_payload(b.type, b.blob)) AS refused OFFSET 0) x
        WHERE b.type = 'msgpack' AND x.refused IS NOT NULL
        ORDER BY v.channel LIMIT 1)                                             AS refused_type
FROM checkpoints c;
COMMENT ON VIEW core_checkpoints_view IS
    'One row per checkpoint: thread, namespace, id, parent, ts, step, source, customer, metadata, decoded channel values, refused_type.';

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
       (SELECT string_agg(k #>> '{}', ',') FROM jsonb_path_query(d.messages, '$[*].tool_name') k) AS tool_name,
       core_refused_type(d.payload)                                            AS refused_type
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
    'One row per pending write: task, channel, size, decoded payload, chat messages (kind, tool calls, tool name), refused_type.';

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
       m.msg ->> 'status'             AS status,
       w.refused_type
FROM core_checkpoint_writes_view w
CROSS JOIN LATERAL jsonb_array_elements(w.messages) WITH ORDINALITY AS m(msg, ord);
COMMENT ON VIEW core_checkpoint_messages_view IS
    'One row per chat message written to a thread (human / ai / tool / system), with tool calls, tool names and the write''s refused_type.';
