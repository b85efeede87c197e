-- DeltaChannel values in the canonical view (issue 42, item 2).
--
-- A DeltaChannel (langgraph >= 1.2) stores its value only at snapshots (a `_DeltaSnapshot` blob every
-- `snapshot_frequency` updates); between them a checkpoint has a version for the channel but no value, and
-- core_checkpoints_view showed the channel absent, as if the state had no such key. langgraph rebuilds the value
-- on read: from the checkpoint's parent up to the first ancestor holding a stored value (or an empty list at the
-- root), that seed and the writes pending on every checkpoint of the walk, oldest first (writes_sort_key: task_path,
-- task_id, idx), passed to the channel's reducer. core/checkpoints/delta.py does the same in Python for the pages.
--
-- Here in SQL, for the two reducers a dashboard can know from the payloads alone:
--   messages: langgraph's `_messages_delta_reducer` (add_messages for DeltaChannels): replace by id, RemoveMessage
--             tombstones, messages without an id appended;
--   concat:   list concatenation.
-- A reducer is used only when the payloads fit it and it rebuilds every stored value of the thread's channel from
-- the one before it (or from the root), so a list reducer that merely looks like concatenation is caught. That
-- check reads the thread's whole chain for each rebuilt checkpoint: a DeltaChannel thread of N checkpoints costs
-- O(N^2) walk steps when read whole; threads without DeltaChannels pay nothing.
-- Otherwise the channel's value is an explicit marker, never an absent key:
--   {"delta": {"rebuilt": false, "reason": ..., "snapshot_checkpoint_id", "snapshot_step", "snapshot", "writes_since",
--              "writes"}}
-- The new column `delta_channels` says, per DeltaChannel at that checkpoint, where its value came from:
--   {"<channel>": {"source": "snapshot" | "rebuilt" | "unrebuilt", "reducer", "snapshot_checkpoint_id",
--                  "snapshot_step", "writes_since"}}.
-- A snapshot checkpoint keeps its decoded `_DeltaSnapshot` object, as before.

-- The stored value of a channel at a version, or NULL: the blob (a snapshot unwrapped), else a non-null inline
-- value (the same precedence as langgraph's reader and core/checkpoints/delta.py).
CREATE FUNCTION core_delta_stored(p_thread text, p_ns text, p_channel text, p_version text, p_inline jsonb)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT coalesce(
        (SELECT CASE WHEN p.payload ->> 'type' = 'langgraph.checkpoint.serde.types._DeltaSnapshot'
                     THEN p.payload -> 'value' ELSE p.payload END
         FROM checkpoint_blobs b CROSS JOIN LATERAL (SELECT core_checkpoint_payload(b.type, b.blob) AS payload) p
         WHERE b.thread_id = p_thread AND b.checkpoint_ns = p_ns AND b.channel = p_channel
           AND b.version = p_version AND b.type <> 'empty'),
        CASE WHEN jsonb_typeof(p_inline) <> 'null' THEN p_inline END)
$$;

-- The walk of one channel from a checkpoint's parent up to the first ancestor with a stored value.
-- complete is false when an ancestor is gone (a pruned chain): nothing can be rebuilt then.
CREATE FUNCTION core_delta_walk(p_thread text, p_ns text, p_checkpoint text, p_channel text,
                                OUT seed_checkpoint_id text, OUT seed_step integer, OUT seed jsonb,
                                OUT writes jsonb, OUT complete boolean)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    cur text;
    r record;
    stored jsonb;
BEGIN
    writes := '[]';
    complete := true;
    SELECT c.parent_checkpoint_id INTO cur FROM checkpoints c
    WHERE c.thread_id = p_thread AND c.checkpoint_ns = p_ns AND c.checkpoint_id = p_checkpoint;
    WHILE cur IS NOT NULL LOOP
        SELECT c.parent_checkpoint_id AS parent, c.checkpoint -> 'channel_versions' ->> p_channel AS version,
               c.checkpoint -> 'channel_values' -> p_channel AS inline,
               CASE WHEN c.metadata ->> 'step' ~ '^-?\d{1,9}$' THEN (c.metadata ->> 'step')::integer END AS step
        INTO r FROM checkpoints c
        WHERE c.thread_id = p_thread AND c.checkpoint_ns = p_ns AND c.checkpoint_id = cur;
        IF NOT FOUND THEN
            complete := false;
            RETURN;
        END IF;
        -- the writes pending on this ancestor come before those of its descendants
        writes := (SELECT coalesce(jsonb_agg(core_checkpoint_payload(w.type, w.blob)
                                             ORDER BY coalesce(w.task_path, '') COLLATE "C", w.task_id COLLATE "C",
                                                      w.idx), '[]')
                   FROM checkpoint_writes w
                   WHERE w.thread_id = p_thread AND w.checkpoint_ns = p_ns AND w.checkpoint_id = cur
                     AND w.channel = p_channel) || writes;
        stored := core_delta_stored(p_thread, p_ns, p_channel, r.version, r.inline);
        IF stored IS NOT NULL THEN
            seed_checkpoint_id := cur;
            seed_step := r.step;
            seed := stored;
            RETURN;
        END IF;
        cur := r.parent;
    END LOOP;
    seed := '[]';  -- the walk reached the root: langgraph starts from an empty list
END
$$;

-- Every element of a list of writes, each write a list (flattened) or a single item.
CREATE FUNCTION core_delta_flat(p_writes jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(jsonb_agg(x.item ORDER BY w.n, x.m), '[]')
    FROM jsonb_array_elements(p_writes) WITH ORDINALITY AS w(write, n)
    CROSS JOIN LATERAL (SELECT e.item, e.m
                        FROM jsonb_array_elements(CASE WHEN jsonb_typeof(w.write) = 'array' THEN w.write
                                                       ELSE jsonb_build_array(w.write) END)
                             WITH ORDINALITY AS e(item, m)) x
$$;

CREATE FUNCTION core_delta_is_message(p_item jsonb) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_typeof(p_item) = 'object' AND jsonb_typeof(p_item -> 'type') = 'string'
       AND p_item ->> 'type' LIKE 'langchain\_core.messages.%' AND jsonb_typeof(p_item -> 'value') = 'object'
$$;

-- langgraph's _messages_delta_reducer on decoded messages.
CREATE FUNCTION core_delta_messages(p_state jsonb, p_writes jsonb) RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    result jsonb[] := ARRAY(SELECT jsonb_array_elements(p_state));
    idx jsonb := '{}';
    msg jsonb;
    mid text;
    i integer;
BEGIN
    FOR i IN 1 .. coalesce(array_length(result, 1), 0) LOOP
        mid := result[i] -> 'value' ->> 'id';
        IF mid IS NOT NULL THEN
            idx := jsonb_set(idx, ARRAY[mid], to_jsonb(i));
        END IF;
    END LOOP;
    FOR msg IN SELECT jsonb_array_elements(core_delta_flat(p_writes)) LOOP
        mid := msg -> 'value' ->> 'id';
        IF mid IS NULL THEN
            result := result || msg;
        ELSIF msg -> 'value' ->> 'type' = 'remove' OR msg ->> 'type' LIKE '%.RemoveMessage' THEN
            IF idx ? mid THEN
                result[(idx ->> mid)::integer] := NULL;
                idx := idx - mid;
            END IF;
        ELSIF idx ? mid THEN
            result[(idx ->> mid)::integer] := msg;
        ELSE
            result := result || msg;
            idx := jsonb_set(idx, ARRAY[mid], to_jsonb(coalesce(array_length(result, 1), 0)));
        END IF;
    END LOOP;
    RETURN coalesce((SELECT jsonb_agg(m ORDER BY n) FROM unnest(result) WITH ORDINALITY AS u(m, n)
                     WHERE m IS NOT NULL), '[]');
END
$$;

-- A known reducer applied to a seed and writes; NULL when the payloads do not fit it.
CREATE FUNCTION core_delta_reduce(p_reducer text, p_seed jsonb, p_writes jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    flat jsonb := core_delta_flat(p_writes);
BEGIN
    IF jsonb_typeof(p_seed) <> 'array' THEN
        RETURN NULL;
    ELSIF p_reducer = 'messages' THEN
        IF jsonb_array_length(p_seed) + jsonb_array_length(flat) = 0
           OR EXISTS (SELECT 1 FROM jsonb_array_elements(p_seed || flat) AS m(item)
                      WHERE NOT core_delta_is_message(m.item)) THEN
            RETURN NULL;
        END IF;
        RETURN core_delta_messages(p_seed, p_writes);
    ELSIF p_reducer = 'concat' THEN
        IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_writes) AS w(write) WHERE jsonb_typeof(w.write) <> 'array') THEN
            RETURN NULL;
        END IF;
        RETURN p_seed || flat;
    END IF;
    RETURN NULL;
END
$$;

-- The reducer of a thread's DeltaChannel: the first known one (messages, then concat) that every walk ending at a
-- stored value fits and that rebuilds each of those stored values from the one before it (or from the root), as
-- core/checkpoints/delta.py chooses. {"reducer": name or null, "checked": stored values rebuilt, "reason"}.
CREATE FUNCTION core_delta_reducer(p_thread text, p_ns text, p_channel text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    alive text[] := ARRAY['messages', 'concat'];
    checked integer := 0;
    reason text := 'no known reducer (messages, concat) fits the payloads';
    c record;
    w record;
    reducer text;
BEGIN
    FOR c IN
        SELECT x.checkpoint_id, x.stored FROM (
            SELECT k.checkpoint_id, core_delta_stored(k.thread_id, k.checkpoint_ns, p_channel,
                                                      k.checkpoint -> 'channel_versions' ->> p_channel,
                                                      k.checkpoint -> 'channel_values' -> p_channel) AS stored
            FROM checkpoints k
            WHERE k.thread_id = p_thread AND k.checkpoint_ns = p_ns AND k.parent_checkpoint_id IS NOT NULL
              AND k.checkpoint -> 'channel_versions' ? p_channel) x
        WHERE x.stored IS NOT NULL
        ORDER BY x.checkpoint_id
    LOOP
        SELECT * INTO w FROM core_delta_walk(p_thread, p_ns, c.checkpoint_id, p_channel);
        CONTINUE WHEN NOT w.complete;
        FOREACH reducer IN ARRAY alive LOOP
            IF core_delta_reduce(reducer, w.seed, w.writes) IS DISTINCT FROM c.stored THEN
                alive := array_remove(alive, reducer);
                reason := format('the %s reducer does not rebuild the stored value at checkpoint %s', reducer,
                                 c.checkpoint_id);
            END IF;
        END LOOP;
        EXIT WHEN alive = '{}';
        checked := checked + 1;
    END LOOP;
    RETURN jsonb_build_object('reducer', alive[1], 'checked', checked,
                              'reason', CASE WHEN alive[1] IS NULL THEN reason END);
END
$$;

-- One DeltaChannel at one checkpoint that has a version for it and no stored value:
-- {"value": <rebuilt value or the marker>, "info": <its delta_channels entry>}.
CREATE FUNCTION core_delta_value(p_thread text, p_ns text, p_checkpoint text, p_channel text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    w record;
    choice jsonb := core_delta_reducer(p_thread, p_ns, p_channel);
    value jsonb;
    reason text := choice ->> 'reason';
BEGIN
    SELECT * INTO w FROM core_delta_walk(p_thread, p_ns, p_checkpoint, p_channel);
    IF NOT w.complete THEN
        reason := 'an ancestor checkpoint is gone (pruned)';
    ELSIF choice ->> 'reducer' IS NOT NULL THEN
        value := core_delta_reduce(choice ->> 'reducer', w.seed, w.writes);
        IF value IS NOT NULL THEN
            RETURN jsonb_build_object(
                'value', value,
                'info', jsonb_build_object('source', 'rebuilt', 'reducer', choice ->> 'reducer',
                                           'snapshots_checked', (choice ->> 'checked')::integer,
                                           'snapshot_checkpoint_id', w.seed_checkpoint_id,
                                           'snapshot_step', w.seed_step,
                                           'writes_since', jsonb_array_length(w.writes)));
        END IF;
        reason := format('the writes since the stored value do not fit the %s reducer', choice ->> 'reducer');
    END IF;
    RETURN jsonb_build_object(
        'value', jsonb_build_object('delta', jsonb_build_object(
            'rebuilt', false, 'reason', reason,
            'snapshot_checkpoint_id', w.seed_checkpoint_id, 'snapshot_step', w.seed_step,
            'snapshot', w.seed, 'writes_since', jsonb_array_length(w.writes), 'writes', w.writes)),
        'info', jsonb_build_object('source', 'unrebuilt', 'reducer', NULL,
                                   'snapshot_checkpoint_id', w.seed_checkpoint_id, 'snapshot_step', w.seed_step,
                                   'writes_since', jsonb_array_length(w.writes)));
END
$$;

-- 065's view, with the DeltaChannels that have a version and no stored value at a checkpoint filled in, and
-- `delta_channels` added last. A checkpoint without DeltaChannels (no `counters_since_delta_snapshot` in its
-- metadata and no snapshot blob) is read exactly as before.
CREATE OR REPLACE VIEW core_checkpoints_view AS
WITH base AS (
    SELECT c.*,
           CASE WHEN jsonb_typeof(c.checkpoint -> 'channel_values') = 'object'
                THEN c.checkpoint -> 'channel_values' ELSE '{}'::jsonb END
           || (SELECT coalesce(jsonb_object_agg(b.channel, core_checkpoint_payload(b.type, b.blob)), '{}'::jsonb)
               FROM jsonb_each_text(CASE WHEN jsonb_typeof(c.checkpoint -> 'channel_versions') = 'object'
                                         THEN c.checkpoint -> 'channel_versions' ELSE '{}' END) AS v(channel, version)
               JOIN checkpoint_blobs b
                 ON b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
                AND b.channel = v.channel AND b.version = v.version
               WHERE b.type <> 'empty') AS stored_values
    FROM checkpoints c
), delta AS (
    SELECT base.*,
           (SELECT jsonb_object_agg(d.channel, core_delta_value(base.thread_id, base.checkpoint_ns,
                                                                base.checkpoint_id, d.channel))
            FROM jsonb_object_keys(CASE WHEN jsonb_typeof(base.metadata -> 'counters_since_delta_snapshot') = 'object'
                                        THEN base.metadata -> 'counters_since_delta_snapshot' ELSE '{}' END) AS d(channel)
            WHERE base.checkpoint -> 'channel_versions' ? d.channel
              AND NOT base.stored_values ? d.channel) AS rebuilt,
           (SELECT jsonb_object_agg(s.key, jsonb_build_object('source', 'snapshot'))
            FROM jsonb_each(base.stored_values) s
            WHERE s.value ->> 'type' = 'langgraph.checkpoint.serde.types._DeltaSnapshot') AS snapshots
    FROM base
)
SELECT d.thread_id,
       d.checkpoint_ns,
       d.checkpoint_id,
       d.parent_checkpoint_id,
       core_try_timestamptz(d.checkpoint ->> 'ts')                             AS ts,
       CASE WHEN d.metadata ->> 'step' ~ '^-?\d{1,9}$' THEN (d.metadata ->> 'step')::integer END AS step,
       d.metadata ->> 'source'                                                 AS source,
       d.metadata ->> 'cliente_id'                                             AS cliente_id,
       d.metadata ->> 'proveedor_id'                                           AS proveedor_id,
       d.metadata ->> 'empleado_id'                                            AS empleado_id,
       d.metadata ->> 'agente'                                                 AS agente,
       d.metadata,
       d.checkpoint -> 'channel_versions'                                      AS channel_versions,
       d.checkpoint -> 'updated_channels'                                      AS updated_channels,
       pg_column_size(d.checkpoint) + pg_column_size(d.metadata)               AS checkpoint_bytes,
       -- every channel's value: inline primitives, then the decoded blobs (which win), then rebuilt DeltaChannels
       d.stored_values || coalesce((SELECT jsonb_object_agg(r.key, r.value -> 'value')
                                    FROM jsonb_each(d.rebuilt) r), '{}')      AS channel_values,
       (SELECT count(*) FROM checkpoint_writes w
        WHERE w.thread_id = d.thread_id AND w.checkpoint_ns = d.checkpoint_ns
          AND w.checkpoint_id = d.checkpoint_id)                                AS pending_writes,
       (SELECT coalesce(sum(octet_length(w.blob)), 0) FROM checkpoint_writes w
        WHERE w.thread_id = d.thread_id AND w.checkpoint_ns = d.checkpoint_ns
          AND w.checkpoint_id = d.checkpoint_id)                                AS pending_write_bytes,
       -- the first type the serializer would refuse among this checkpoint's channel values
       (SELECT x.refused
        FROM jsonb_each_text(CASE WHEN jsonb_typeof(d.checkpoint -> 'channel_versions') = 'object'
                                  THEN d.checkpoint -> 'channel_versions' ELSE '{}' END) AS v(channel, version)
        JOIN checkpoint_blobs b
          ON b.thread_id = d.thread_id AND b.checkpoint_ns = d.checkpoint_ns
         AND b.channel = v.channel AND b.version = v.version
        CROSS JOIN LATERAL (SELECT core_refused_type(core_checkpoint_payload(b.type, b.blob)) AS refused OFFSET 0) x
        WHERE b.type IN ('msgpack', 'pickle') AND x.refused IS NOT NULL
        ORDER BY v.channel LIMIT 1)                                             AS refused_type,
       -- where each DeltaChannel's value comes from at this checkpoint (NULL: the checkpoint has none)
       CASE WHEN d.rebuilt IS NOT NULL OR d.snapshots IS NOT NULL
            THEN coalesce(d.snapshots, '{}') || coalesce((SELECT jsonb_object_agg(r.key, r.value -> 'info')
                                                          FROM jsonb_each(d.rebuilt) r), '{}') END AS delta_channels
FROM delta d;

COMMENT ON COLUMN core_checkpoints_view.delta_channels IS
    'Per DeltaChannel at this checkpoint: source snapshot | rebuilt (reducer messages or concat, from snapshot_checkpoint_id plus writes_since writes) | unrebuilt (channel_values holds a {"delta": ...} marker).';

REVOKE ALL ON FUNCTION core_delta_stored(text, text, text, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION core_delta_walk(text, text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION core_delta_flat(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION core_delta_is_message(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION core_delta_messages(jsonb, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION core_delta_reduce(text, jsonb, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION core_delta_reducer(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION core_delta_value(text, text, text, text) FROM PUBLIC;
