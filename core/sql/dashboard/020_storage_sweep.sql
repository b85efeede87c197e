-- The dashboard's own database (issue 52), clusters D and F: what the sweep's storage refresh and attribution
-- coverage keep (core/storage/storage.py, storage_detail.py, core/privacy/subjects.py), the keys of the blobs a prune
-- freed that wait for their grace (core/storage/prune.py), and the sweep's own log (core/operations/sweep.py: its runs,
-- the first documents each deleted, the threads each pruned). Same tables, indexes, sequence and foreign keys as the
-- agents'-side migrations 002, 009, 020, 042, 045, 048, 049, 060, 061, 062, 071, 085, 090, 121, 130 and 142 left
-- them (pg_dump of a migrated database, tidied), with no rows and no backfill: the next sweep refreshes the storage
-- figures and the coverage from the agents' tables; an upgrade in place copies every table with its ids
-- (docs/own-database-plan.md, section 5).
--
-- Logged, all of it: the sweep log and its two detail tables are evidence; the pending blob keys are not derivable
-- (which blobs a prune freed is known only to that prune); the storage figures are derivable but a lost table would
-- leave the pages without figures until the next sweep, and the coverage snapshot keeps which configuration it was
-- computed for.

CREATE TABLE core_sweep_log (
    id bigserial PRIMARY KEY,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    trigger text NOT NULL,
    operator text,
    host text NOT NULL,
    status text NOT NULL,
    dry_run boolean DEFAULT false NOT NULL,
    documents_deleted bigint DEFAULT 0 NOT NULL,
    vectors_deleted bigint DEFAULT 0 NOT NULL,
    deleted_by_root jsonb DEFAULT '{}'::jsonb NOT NULL,
    retention_days integer,
    threads_deleted integer DEFAULT 0 NOT NULL,
    threads_found integer DEFAULT 0 NOT NULL,
    threads_sample jsonb,
    erasure_recheck text,
    error text,
    tool_calls_extracted bigint,
    threads_tokenized bigint,
    prune_policy jsonb,
    prune_threads integer,
    prune_checkpoints bigint,
    prune_writes bigint,
    prune_blobs bigint,
    prune_bytes bigint,
    data_views_deleted bigint,
    CONSTRAINT core_sweep_log_retention_days_check CHECK ((retention_days >= 1)),
    CONSTRAINT core_sweep_log_status_check CHECK ((status = ANY (ARRAY['running'::text, 'ok'::text, 'dry_run'::text,
        'locked'::text, 'error'::text, 'stopped'::text]))),
    CONSTRAINT core_sweep_log_trigger_check CHECK ((trigger = ANY (ARRAY['scheduled'::text, 'manual'::text,
        'demo'::text])))
);
CREATE INDEX core_sweep_log_started_idx ON core_sweep_log USING btree (started_at);

CREATE TABLE core_sweep_documents (
    run_id bigint NOT NULL REFERENCES core_sweep_log(id) ON DELETE CASCADE,
    prefix text NOT NULL,
    key text NOT NULL,
    PRIMARY KEY (run_id, prefix, key)
);

CREATE TABLE core_prune_threads (
    run_id bigint NOT NULL REFERENCES core_sweep_log(id) ON DELETE CASCADE,
    thread_id text NOT NULL,
    checkpoints integer NOT NULL,
    writes integer NOT NULL,
    blobs integer NOT NULL,
    bytes bigint NOT NULL,
    PRIMARY KEY (run_id, thread_id)
);

CREATE TABLE core_prune_pending_blobs (
    thread_id text NOT NULL,
    checkpoint_ns text NOT NULL,
    channel text NOT NULL,
    version text NOT NULL,
    pruned_at timestamp with time zone DEFAULT now() NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
);
CREATE INDEX core_prune_pending_blobs_pruned_at ON core_prune_pending_blobs USING btree (pruned_at);

CREATE TABLE core_thread_storage (
    thread_id text PRIMARY KEY,
    cliente_id text,
    checkpoints bigint NOT NULL,
    checkpoint_bytes bigint NOT NULL,
    blobs bigint NOT NULL,
    blob_bytes bigint NOT NULL,
    writes bigint NOT NULL,
    write_bytes bigint NOT NULL,
    total_bytes bigint NOT NULL,
    last_ts timestamp with time zone,
    computed_at timestamp with time zone DEFAULT now() NOT NULL,
    metadata_keys text[] DEFAULT '{}'::text[] NOT NULL,
    known boolean,
    fingerprint numeric
);
CREATE INDEX core_thread_storage_cliente_idx ON core_thread_storage USING btree (cliente_id)
    WHERE (cliente_id IS NOT NULL);
CREATE INDEX core_thread_storage_total_idx ON core_thread_storage USING btree (total_bytes DESC, thread_id);
CREATE INDEX core_thread_storage_unknown_idx ON core_thread_storage USING btree (total_bytes DESC, thread_id)
    WHERE (known = false);

CREATE TABLE core_thread_storage_refresh (
    singleton boolean DEFAULT true NOT NULL PRIMARY KEY,
    computed_at timestamp with time zone DEFAULT now() NOT NULL,
    metadata_keys text[] NOT NULL,
    threads bigint NOT NULL,
    checkpoints bigint NOT NULL,
    blobs bigint NOT NULL,
    writes bigint NOT NULL,
    batches integer NOT NULL,
    batch_rows integer NOT NULL,
    seconds double precision NOT NULL,
    orphan_blobs bigint,
    orphan_blob_bytes bigint,
    orphan_writes bigint,
    orphan_write_bytes bigint,
    unknown_threads bigint,
    unknown_thread_bytes bigint,
    unknown_threads_error text,
    sweep_run_id bigint,
    CONSTRAINT core_thread_storage_refresh_singleton_check CHECK (singleton)
);

CREATE TABLE core_channel_storage (
    thread_id text NOT NULL,
    channel text NOT NULL,
    blobs bigint NOT NULL,
    blob_bytes bigint NOT NULL,
    writes bigint NOT NULL,
    write_bytes bigint NOT NULL,
    PRIMARY KEY (thread_id, channel)
);
CREATE INDEX core_channel_storage_channel_idx ON core_channel_storage USING btree (channel);

CREATE TABLE core_thread_growth (
    thread_id text PRIMARY KEY,
    steps integer NOT NULL,
    bytes bigint NOT NULL,
    first_step_bytes bigint NOT NULL,
    last_step_bytes bigint NOT NULL,
    slope double precision,
    superlinear boolean NOT NULL
);
CREATE INDEX core_thread_growth_superlinear_idx ON core_thread_growth USING btree (slope DESC) WHERE superlinear;

CREATE TABLE core_thread_orphans (
    thread_id text PRIMARY KEY,
    blobs bigint NOT NULL,
    blob_bytes bigint NOT NULL,
    writes bigint NOT NULL,
    write_bytes bigint NOT NULL
);

CREATE TABLE core_coverage_snapshot (
    config jsonb PRIMARY KEY,
    threads bigint NOT NULL,
    unattributed_threads bigint NOT NULL,
    bytes bigint NOT NULL,
    unattributed_bytes bigint NOT NULL,
    computed_at timestamp with time zone DEFAULT now() NOT NULL,
    sweep_run_id bigint
);
