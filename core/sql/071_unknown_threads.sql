-- Threads the application no longer knows (issue 27): the checkpoint threads the configured KNOWN_THREADS_QUERY does
-- not return, found by the sweep's storage refresh in its batches and snapshot (core/checkpoints/storage_detail.py).

-- Per thread: true when the query returned it, false when not, NULL when not checked (no query, or it had failed
-- before this thread's range). Read only when the refresh's totals below are set: a query failing midway leaves the
-- ranges it had checked.
ALTER TABLE core_thread_storage ADD COLUMN IF NOT EXISTS known boolean;
CREATE INDEX IF NOT EXISTS core_thread_storage_unknown_idx ON core_thread_storage (total_bytes DESC, thread_id)
    WHERE known = false;

-- Totals at the refresh's snapshot: both NULL when no query was configured (nothing can tell), or when it failed
-- (`unknown_threads_error` says why).
ALTER TABLE core_thread_storage_refresh
    ADD COLUMN IF NOT EXISTS unknown_threads       bigint,
    ADD COLUMN IF NOT EXISTS unknown_thread_bytes  bigint,
    ADD COLUMN IF NOT EXISTS unknown_threads_error text;
