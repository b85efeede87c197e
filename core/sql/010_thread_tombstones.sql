-- Tombstones of erased threads. The erasure (core/privacy/erasure.py) inserts a row for every thread
-- it erases; the dual saver (core/checkpoints/recovery.py, degraded_buffer.py) checks them before it
-- replays a buffered thread or seeds one from its read cache, so that a replica degraded during an
-- erasure does not bring the erased thread back. Kept: a tombstone is what stops a late replay.
CREATE TABLE IF NOT EXISTS core_thread_tombstones (
    thread_id   text PRIMARY KEY,
    request_id  bigint,
    erased_at   timestamptz NOT NULL DEFAULT now()
);
