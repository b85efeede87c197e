-- Where the checkpoint bytes go (issue 27), kept by the sweep's storage refresh in the same batches and snapshot as
-- core_thread_storage (core/checkpoints/storage_detail.py). Counts and sizes only: a thread id and a channel name.

-- Bytes per channel and thread: the blobs of its channel values and the writes to it.
CREATE TABLE IF NOT EXISTS core_channel_storage (
    thread_id   text   NOT NULL,
    channel     text   NOT NULL,
    blobs       bigint NOT NULL,
    blob_bytes  bigint NOT NULL,
    writes      bigint NOT NULL,
    write_bytes bigint NOT NULL,
    PRIMARY KEY (thread_id, channel)
);
CREATE INDEX IF NOT EXISTS core_channel_storage_channel_idx ON core_channel_storage (channel);

-- How a thread grows with its steps: bytes each checkpoint added (its row, the blobs of the channels it changed, its
-- writes), the least-squares slope of those bytes over the step number (bytes per step, per step), and whether it
-- grows faster than linearly (slope x steps > mean bytes per step, at least 5 steps).
CREATE TABLE IF NOT EXISTS core_thread_growth (
    thread_id        text             PRIMARY KEY,
    steps            integer          NOT NULL,
    bytes            bigint           NOT NULL,
    first_step_bytes bigint           NOT NULL,
    last_step_bytes  bigint           NOT NULL,
    slope            double precision,
    superlinear      boolean          NOT NULL
);
CREATE INDEX IF NOT EXISTS core_thread_growth_superlinear_idx ON core_thread_growth (slope DESC) WHERE superlinear;

-- Orphans at the refresh's snapshot: blobs no checkpoint of their thread and namespace references, writes whose
-- checkpoint is gone (either may be in flight: the checkpointer writes blobs and writes before their checkpoint).
ALTER TABLE core_thread_storage_refresh
    ADD COLUMN IF NOT EXISTS orphan_blobs       bigint,
    ADD COLUMN IF NOT EXISTS orphan_blob_bytes  bigint,
    ADD COLUMN IF NOT EXISTS orphan_writes      bigint,
    ADD COLUMN IF NOT EXISTS orphan_write_bytes bigint;
