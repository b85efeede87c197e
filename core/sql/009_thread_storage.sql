-- Storage per checkpoint thread, refreshed by the sweep job (core.checkpoints.refresh_thread_storage):
-- the live aggregate scans the three checkpoint tables (1.55 s at 1M writes, BENCHMARKS.md), too slow
-- for a page. A table, not a materialized view, so an erasure finds and deletes the rows naming a
-- customer (cliente_id, thread_id) like every other core_* table.
CREATE TABLE IF NOT EXISTS core_thread_storage (
    thread_id         text PRIMARY KEY,
    cliente_id        text,
    checkpoints       bigint      NOT NULL,
    checkpoint_bytes  bigint      NOT NULL,
    blobs             bigint      NOT NULL,
    blob_bytes        bigint      NOT NULL,
    writes            bigint      NOT NULL,
    write_bytes       bigint      NOT NULL,
    total_bytes       bigint      NOT NULL,
    last_ts           timestamptz,
    computed_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS core_thread_storage_total_idx ON core_thread_storage (total_bytes DESC, thread_id);
