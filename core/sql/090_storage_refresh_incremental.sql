-- The sweep's storage refresh made incremental (issue 27): the per-thread summary is still recomputed for every
-- thread (one range scan of each checkpoint table per batch), but the detail (bytes per channel and per step, the
-- orphans) only for the threads whose rows changed since the last refresh. At 1M checkpoint writes the detail cost
-- 9x the summary (BENCHMARKS.md, "Storage refresh"), because it expands the channel_versions of every checkpoint.

-- What the thread's detail was computed from: the sum of a 64-bit hash of each of its rows in the three tables (the
-- keys, sizes and channel_versions the detail reads; core/checkpoints/storage.py), seeded with the detail's own SQL
-- (a new release that computes the detail otherwise recomputes every thread). NULL: never computed (every thread
-- is recomputed by the first refresh after this migration).
ALTER TABLE core_thread_storage ADD COLUMN IF NOT EXISTS fingerprint numeric;

-- Orphans per thread (only threads that have any), so the refresh's totals are sums of per-thread rows and a thread
-- left unchanged keeps its own: blobs whose (thread, namespace, channel, version) no checkpoint references, writes
-- whose checkpoint is gone. Counts and sizes only.
CREATE TABLE IF NOT EXISTS core_thread_orphans (
    thread_id   text   PRIMARY KEY,
    blobs       bigint NOT NULL,
    blob_bytes  bigint NOT NULL,
    writes      bigint NOT NULL,
    write_bytes bigint NOT NULL
);
