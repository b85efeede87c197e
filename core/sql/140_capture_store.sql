-- Nothing of ours on the store's write path (issue 37): the four statement triggers on `store` (055) and the four
-- on `store_vectors` (046) are dropped with their functions. What they kept (core_prefix_counts, core_root_counts,
-- core_expiry_days, core_value_holders) is kept from here by the change follower (core/capture/), which reads the
-- agents' committed changes from a logical replication slot (pgoutput) on the publication created below and
-- applies each batch in one transaction with the position it reached (core_capture_position).
--
-- A DELETE in the stream carries only the primary key (REPLICA IDENTITY DEFAULT, which we do not change on the
-- agents' tables), and an overwrite carries no old row: the follower keeps, in core_store_shadow, what each
-- document contributed (its expiry day, the hashes of its string values when it is a customer's), written by the
-- follower, never by the agents.
--
-- The aggregates are rebuilt from the rows when the follower creates its slot (core.capture.follower: a recount
-- in a snapshot taken after the slot's consistent point, transactions visible in it skipped when decoded).

DROP TRIGGER IF EXISTS core_store_ins ON store;
DROP TRIGGER IF EXISTS core_store_upd ON store;
DROP TRIGGER IF EXISTS core_store_del ON store;
DROP TRIGGER IF EXISTS core_store_trunc ON store;
DROP TRIGGER IF EXISTS core_root_counts_vec_ins ON store_vectors;
DROP TRIGGER IF EXISTS core_root_counts_vec_upd ON store_vectors;
DROP TRIGGER IF EXISTS core_root_counts_vec_del ON store_vectors;
DROP TRIGGER IF EXISTS core_root_counts_vec_trunc ON store_vectors;
DROP FUNCTION IF EXISTS core_store_inserted(), core_store_updated(), core_store_deleted(), core_store_truncated(),
    core_root_counts_vectors(), core_root_counts_truncate(), core_value_holders_drop(bigint[], text[]);

-- Where the follower is: `lsn`, every transaction committed at or before it is applied; `caught_up_lsn`, the
-- WAL flushed before its last read that found nothing more (everything written before `caught_up_at` is in the
-- aggregates). `recount_snapshot`: the snapshot the aggregates were recounted in when the slot was created; a
-- decoded transaction visible in it (committed before `recount_lsn`) was counted by the recount already.
CREATE TABLE IF NOT EXISTS core_capture_position (
    slot_name         text PRIMARY KEY,
    lsn               pg_lsn      NOT NULL,
    applied_at        timestamptz NOT NULL DEFAULT now(),
    caught_up_lsn     pg_lsn,
    caught_up_at      timestamptz,
    recount_snapshot  pg_snapshot,
    recount_lsn       pg_lsn,
    recounted_at      timestamptz
);

-- What each store document contributes to the aggregates, by primary key (the follower's memory of old rows).
CREATE TABLE IF NOT EXISTS core_store_shadow (
    prefix        text   NOT NULL,
    key           text   NOT NULL,
    expires_day   date,              -- (expires_at AT TIME ZONE 'UTC')::date
    value_hashes  bigint[],          -- core_value_holders_of's hashes, customers' documents only
    PRIMARY KEY (prefix, key)
);

-- The follower reads only these columns: no checkpoint payload, blob or embedding is ever decoded.
DROP PUBLICATION IF EXISTS core_capture;
CREATE PUBLICATION core_capture FOR TABLE
    store (prefix, key, value, updated_at, expires_at),
    store_vectors (prefix, key, field_name),
    checkpoints (thread_id, checkpoint_ns, checkpoint_id),
    checkpoint_blobs (thread_id, checkpoint_ns, channel, version),
    checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx);
