-- One row per run of the sweep job (`python -m core.sweep`): the store's TTL sweep and the
-- checkpoint retention. Written at the start (status 'running') and completed at the end, so a
-- run that died midway stays visible. A run refused because another one held the advisory lock
-- is logged too (status 'locked'): it shows two schedulers overlapping.
CREATE TABLE IF NOT EXISTS core_sweep_log (
    id                 bigserial PRIMARY KEY,
    started_at         timestamptz NOT NULL DEFAULT now(),
    finished_at        timestamptz,
    trigger            text        NOT NULL CHECK (trigger IN ('scheduled', 'manual', 'demo')),
    operator           text,                  -- who asked for a manual run (dashboard user)
    host               text        NOT NULL,  -- the pod / machine that ran it
    status             text        NOT NULL CHECK (status IN ('running', 'ok', 'dry_run', 'locked', 'error')),
    dry_run            boolean     NOT NULL DEFAULT false,
    -- TTL sweep: store rows deleted (in a dry run: expired rows that would be deleted), the
    -- store_vectors rows removed with them by ON DELETE CASCADE, and the documents per namespace root.
    documents_deleted  bigint      NOT NULL DEFAULT 0,
    vectors_deleted    bigint      NOT NULL DEFAULT 0,
    deleted_by_root    jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- Checkpoint retention: threads whose newest checkpoint is older than retention_days.
    retention_days     integer     CHECK (retention_days >= 1),
    threads_deleted    integer     NOT NULL DEFAULT 0,
    threads_found      integer     NOT NULL DEFAULT 0,
    threads_sample     jsonb,                 -- the first thread ids found (all of them up to 1000)
    erasure_recheck    text,                  -- what the erasure register's re-check reported, if it ran
    error              text
);
CREATE INDEX IF NOT EXISTS core_sweep_log_started_idx ON core_sweep_log (started_at);
