-- History pruning of live threads (issue 27, core/checkpoints/prune.py), a step of the sweep job: its policy and
-- totals in the run's row of core_sweep_log (in a dry run: what it would delete), and the threads it pruned (the
-- Sweeps page's download). NULL prune_policy: the run did not prune.
ALTER TABLE core_sweep_log
    ADD COLUMN IF NOT EXISTS prune_policy      jsonb,   -- {"keep_latest": N, "idle_minutes": M, "agent": ..., "root": ...}
    ADD COLUMN IF NOT EXISTS prune_threads     integer,
    ADD COLUMN IF NOT EXISTS prune_checkpoints bigint,
    ADD COLUMN IF NOT EXISTS prune_writes      bigint,
    ADD COLUMN IF NOT EXISTS prune_blobs       bigint,
    ADD COLUMN IF NOT EXISTS prune_bytes       bigint;

-- One row per thread a run pruned (or, in a dry run, would prune). A thread id names a conversation: an erasure
-- deletes its rows here (our tables with a thread_id column are found by column, core/privacy/evidence.py).
CREATE TABLE IF NOT EXISTS core_prune_threads (
    run_id      bigint  NOT NULL REFERENCES core_sweep_log (id) ON DELETE CASCADE,
    thread_id   text    NOT NULL,
    checkpoints integer NOT NULL,
    writes      integer NOT NULL,
    blobs       integer NOT NULL,
    bytes       bigint  NOT NULL,
    PRIMARY KEY (run_id, thread_id)
);
