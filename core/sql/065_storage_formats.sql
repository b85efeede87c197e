-- Every storage format langgraph writes, named (issue 28). Beside the classic msgpack rows:
-- - encrypted rows (EncryptedSerializer): blob type `<type>+<cipher>` (`msgpack+aes`); the SQL decoder never has
--   the key, so such a payload is {"undecodable": ..., "encrypted": true} (core/checkpoints/formats.py decrypts
--   in Python when the operator configured the key, and never writes the plaintext back);
-- - pickle rows (`pickle_fallback=True`): never unpickled; marked like a refused payload, {"type": "pickle",
--   "refused": true}, so the views' refused_type column says `pickle`;
-- - DeltaChannel snapshots: a msgpack ext 7 at the top of the blob, and an inline `true` marker in the
--   checkpoint's channel_values. The marker used to win over the blob in core_checkpoints_view (the channel
--   read `true`); now a channel's blob wins over an inline value, as langgraph's own reader does.
-- core_blob_format names a row's format from its type and its first bytes only (cheap on millions of rows).

CREATE OR REPLACE FUNCTION core_blob_format(blob_type text, head bytea) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    -- `head`: the blob's first bytes (6 are enough): a top-level msgpack ext 7 is a DeltaChannel snapshot
    SELECT CASE
        WHEN blob_type LIKE '%+%' THEN 'encrypted'
        WHEN blob_type = 'pickle' THEN 'pickle'
        WHEN blob_type = 'json' THEN 'json'
        WHEN blob_type = 'msgpack' AND octet_length(head) >= 3 AND (
                 (get_byte(head, 0) BETWEEN 212 AND 216 AND get_byte(head, 1) = 7)       -- fixext 1..16
              OR (get_byte(head, 0) = 199 AND get_byte(head, 2) = 7)                     -- ext 8
              OR (get_byte(head, 0) = 200 AND octet_length(head) >= 4 AND get_byte(head, 3) = 7)   -- ext 16
              OR (get_byte(head, 0) = 201 AND octet_length(head) >= 6 AND get_byte(head, 5) = 7))  -- ext 32
            THEN 'delta'
        WHEN blob_type IN ('msgpack', 'null', 'empty', 'bytes', 'bytearray') THEN 'classic'
        ELSE 'unknown'
    END
$$;
COMMENT ON FUNCTION core_blob_format(text, bytea) IS
    'The storage format of a checkpoint (type, first bytes) pair: classic, delta (DeltaChannel snapshot), encrypted, pickle, json or unknown.';

CREATE OR REPLACE FUNCTION core_checkpoint_payload(blob_type text, blob bytea) RETURNS jsonb
LANGUAGE plpgsql STABLE PARALLEL SAFE COST 1000 AS $$
-- A checkpoint_blobs / checkpoint_writes (type, blob) pair as jsonb. Never raises (except on a
-- cancelled query): what cannot be decoded is {"undecodable": "<reason>", "blob_type", "size"}
-- (plus "encrypted": true for an encrypted row); a pickle row is {"type": "pickle", "refused": true}.
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
    ELSIF blob_type = 'pickle' THEN                   -- loading it runs code: never unpickled, refused
        RETURN jsonb_build_object('type', 'pickle', 'refused', true, 'blob_type', blob_type,
                                  'size', coalesce(octet_length(blob), 0));
    ELSIF blob_type LIKE '%+%' THEN                   -- EncryptedSerializer: the key never reaches SQL
        RETURN jsonb_build_object('undecodable', format('encrypted (%s): no key in SQL', blob_type),
                                  'encrypted', true, 'blob_type', blob_type, 'size', coalesce(octet_length(blob), 0));
    ELSE
        RETURN jsonb_build_object('undecodable', format('blob type %s is never decoded here', coalesce(blob_type, 'NULL')),
                                  'blob_type', blob_type, 'size', coalesce(octet_length(blob), 0));
    END IF;
EXCEPTION WHEN OTHERS THEN
    RETURN jsonb_build_object('undecodable', SQLERRM, 'blob_type', blob_type, 'size', coalesce(octet_length(blob), 0));
END
$$;

-- 021's view with one change: inline values first, then the blobs (a blob wins over an inline `true` marker).
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
       -- every channel's value at this checkpoint: inline primitives, then the decoded blobs (which win)
       CASE WHEN jsonb_typeof(c.checkpoint -> 'channel_values') = 'object'
            THEN c.checkpoint -> 'channel_values' ELSE '{}'::jsonb END
       || (SELECT coalesce(jsonb_object_agg(b.channel, core_checkpoint_payload(b.type, b.blob)), '{}'::jsonb)
           FROM jsonb_each_text(CASE WHEN jsonb_typeof(c.checkpoint -> 'channel_versions') = 'object'
                                     THEN c.checkpoint -> 'channel_versions' ELSE '{}' END) AS v(channel, version)
           JOIN checkpoint_blobs b
             ON b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
            AND b.channel = v.channel AND b.version = v.version
           WHERE b.type <> 'empty')                                             AS channel_values,
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
        WHERE b.type IN ('msgpack', 'pickle') AND x.refused IS NOT NULL
        ORDER BY v.channel LIMIT 1)                                             AS refused_type
FROM checkpoints c;

REVOKE ALL ON FUNCTION core_blob_format(text, bytea) FROM PUBLIC;
REVOKE ALL ON FUNCTION core_checkpoint_payload(text, bytea) FROM PUBLIC;
