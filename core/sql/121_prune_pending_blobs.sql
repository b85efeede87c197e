-- Issue 43: blobs of pruned checkpoints are deleted after a grace period, not by the prune itself. A run that
-- loaded a checkpoint before the prune deleted it (a fork from an old checkpoint_id, a replay) writes a new checkpoint
-- that references the loaded checkpoint's blobs of the channels it did not change; deleting them at once left that
-- head pointing at missing blobs. The prune records the keys here (core/checkpoints/prune.py); a later prune or sweep
-- deletes a blob once its row is older than the grace and, in the deleting statement, no checkpoint of its thread
-- and namespace references it. Keys only (no payload); erasure deletes an erased thread's rows (thread_id column).
CREATE TABLE IF NOT EXISTS core_prune_pending_blobs (
    thread_id     text NOT NULL,
    checkpoint_ns text NOT NULL,
    channel       text NOT NULL,
    version       text NOT NULL,
    pruned_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
);
CREATE INDEX IF NOT EXISTS core_prune_pending_blobs_pruned_at ON core_prune_pending_blobs (pruned_at);
