-- The five indexes of ours left on `checkpoints` go (issue 37: nothing of ours on the agents' write path; each was
-- an extra index entry in every checkpoint a graph turn writes). What they served:
--
-- core_checkpoints_cliente_idx (006), core_checkpoints_customer_id_idx, core_checkpoints_user_id_idx (041): the
--   attribution's lookup of a customer's threads by a metadata key (erasure, access export, their previews).
-- core_checkpoints_thread_pattern_idx (041): the lookup by a configured thread-id pattern (`LIKE 'cliente-C1-%'`).
--
-- core_checkpoints_ts_idx (006, `checkpoint ->> 'ts'`): the tool-call extraction and the recent threads read
--   checkpoints in their `ts` order from a watermark.
--
-- The change follower now keeps, per checkpoint, its key, the subjects its metadata names and its `ts`
-- (core_checkpoint_shadow, in our schema, with our indexes): the publication carries `metadata` of `checkpoints`
-- (small: source, step, parents and the run's configurable keys; never the checkpoint, a blob or a write); `ts`,
-- inside the checkpoint payload the publication leaves out, the follower reads from the row by its primary key. A
-- DELETE (delete_thread, a prune, an erasure) drops the shadow row by key. The readers that must be current call
-- core.capture.status.sync first, as for the store's aggregates; the extraction applies what the slot holds when
-- no follower runs (core.capture.follower.apply_pending). The zero-count evidence after an erasure still reads
-- `checkpoints` itself (the DPO's proof never trusts our tables): a sequential scan per evidence round.
--
-- A follower of an older release does not keep this table: stop it, run the migrations, start the new one.
DROP INDEX IF EXISTS core_checkpoints_cliente_idx;
DROP INDEX IF EXISTS core_checkpoints_customer_id_idx;
DROP INDEX IF EXISTS core_checkpoints_user_id_idx;
DROP INDEX IF EXISTS core_checkpoints_thread_pattern_idx;
DROP INDEX IF EXISTS core_checkpoints_ts_idx;

-- The top-level scalar entries of a checkpoint's metadata, as `metadata ->> key` gives them (what a metadata-key
-- lookup compares); NULL when there is none.
CREATE OR REPLACE FUNCTION core_metadata_subjects(metadata jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_object_agg(e.key, e.value #>> '{}') FROM jsonb_each(metadata) AS e
    WHERE jsonb_typeof(metadata) = 'object' AND jsonb_typeof(e.value) IN ('string', 'number', 'boolean')
$$;
REVOKE ALL ON FUNCTION core_metadata_subjects(jsonb) FROM PUBLIC;

CREATE TABLE IF NOT EXISTS core_checkpoint_shadow (
    thread_id      text NOT NULL,
    checkpoint_ns  text NOT NULL,
    checkpoint_id  text NOT NULL,
    subjects       jsonb,
    ts             text,  -- checkpoint ->> 'ts', compared as text as the extraction's watermark is
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);
CREATE INDEX IF NOT EXISTS core_checkpoint_shadow_ts_idx
    ON core_checkpoint_shadow (ts, thread_id, checkpoint_ns, checkpoint_id);
CREATE INDEX IF NOT EXISTS core_checkpoint_shadow_thread_pattern_idx
    ON core_checkpoint_shadow (thread_id text_pattern_ops);
CREATE INDEX IF NOT EXISTS core_checkpoint_shadow_subjects_idx
    ON core_checkpoint_shadow USING gin (subjects jsonb_path_ops);

ALTER PUBLICATION core_capture SET TABLE
    store (prefix, key, value, updated_at, expires_at),
    store_vectors (prefix, key, field_name),
    checkpoints (thread_id, checkpoint_ns, checkpoint_id, metadata),
    checkpoint_blobs (thread_id, checkpoint_ns, channel, version),
    checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx);

INSERT INTO core_checkpoint_shadow (thread_id, checkpoint_ns, checkpoint_id, subjects, ts)
SELECT thread_id, checkpoint_ns, checkpoint_id, core_metadata_subjects(metadata), checkpoint ->> 'ts' FROM checkpoints
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET subjects = EXCLUDED.subjects, ts = EXCLUDED.ts;
