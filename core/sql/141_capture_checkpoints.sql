-- Nothing of ours on the checkpoint tables' write path (issue 37): the six statement triggers of 042 that listed
-- written threads in core_token_dirty (for the token index) are dropped with their function. The change follower
-- (core/capture/) lists them from the INSERTs and UPDATEs of `checkpoints`, `checkpoint_blobs` and
-- `checkpoint_writes` it decodes; the publication (140) carries only their key columns, never a payload or blob.
-- Reads that trust the list (the residue scan of an erasure, its preview, the access export) first wait until the
-- follower has applied everything written before them (core.capture.status.sync).

DROP TRIGGER IF EXISTS core_tokens_dirty_insert ON checkpoints;
DROP TRIGGER IF EXISTS core_tokens_dirty_update ON checkpoints;
DROP TRIGGER IF EXISTS core_tokens_dirty_insert ON checkpoint_blobs;
DROP TRIGGER IF EXISTS core_tokens_dirty_update ON checkpoint_blobs;
DROP TRIGGER IF EXISTS core_tokens_dirty_insert ON checkpoint_writes;
DROP TRIGGER IF EXISTS core_tokens_dirty_update ON checkpoint_writes;
DROP FUNCTION IF EXISTS core_mark_threads_dirty();
