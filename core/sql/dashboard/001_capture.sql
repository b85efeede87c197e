-- The dashboard's own database (issue 52), its first migration: the change follower's state. What the follower
-- decodes from the agents' WAL (core/capture) is applied here: its position, dead letters and recount requests, the
-- store's and checkpoints' shadows, the counts per prefix, root and expiry day, the value holders and the token
-- index's dirty marks. Same tables as the agents'-side migrations 007-152 left them (pg_dump of a migrated database),
-- and the three pure functions the follower computes with.
--
-- UNLOGGED: everything here is recounted from the agents' tables when it is missing, so none of it is written to the
-- WAL. The dashboard's database may then share the agents' server (the embedded default) without the follower adding
-- a byte to the WAL their slot must keep, their standbys receive and their archive stores: its recount, its batches
-- and its heartbeat write none. After a crash of that server PostgreSQL empties these tables; the follower then finds
-- no position, drops its slot, creates a new one and recounts (its pages say "as of" until then).

CREATE FUNCTION core_string_leaves(value jsonb) RETURNS SETOF text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
    SELECT DISTINCT v #>> '{}' FROM jsonb_path_query(value, 'strict $.**') AS v WHERE jsonb_typeof(v) = 'string'
$_$;

CREATE FUNCTION core_metadata_subjects(metadata jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT jsonb_object_agg(e.key, e.value #>> '{}') FROM jsonb_each(metadata) AS e
    WHERE jsonb_typeof(metadata) = 'object' AND jsonb_typeof(e.value) IN ('string', 'number', 'boolean')
$$;

CREATE FUNCTION core_value_holders_of(prefix text, value jsonb, OUT value_hash bigint, OUT cliente_id text)
    RETURNS SETOF record
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT hashtextextended(l, 0), split_part(prefix, '.', 2) FROM core_string_leaves(value) AS l
    WHERE prefix LIKE 'clientes.%'
$$;

CREATE UNLOGGED TABLE core_capture_dead_letters (
    id bigint NOT NULL,
    slot_name text NOT NULL,
    lsn pg_lsn NOT NULL,
    xid bigint NOT NULL,
    table_name text NOT NULL,
    row_key text NOT NULL,
    error text NOT NULL,
    unknown text[] NOT NULL,
    recorded_at timestamp with time zone DEFAULT now() NOT NULL,
    recounted_at timestamp with time zone
);
ALTER TABLE core_capture_dead_letters ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME core_capture_dead_letters_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE UNLOGGED TABLE core_capture_position (
    slot_name text NOT NULL,
    lsn pg_lsn NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL,
    caught_up_lsn pg_lsn,
    caught_up_at timestamp with time zone,
    recount_snapshot pg_snapshot,
    recount_lsn pg_lsn,
    recounted_at timestamp with time zone
);

CREATE UNLOGGED TABLE core_capture_recount_requests (
    slot_name text NOT NULL,
    requested_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE UNLOGGED TABLE core_checkpoint_shadow (
    thread_id text NOT NULL,
    checkpoint_ns text NOT NULL,
    checkpoint_id text NOT NULL,
    subjects jsonb,
    ts text
);

CREATE UNLOGGED TABLE core_expiry_days (
    day date NOT NULL,
    root text NOT NULL,
    documents bigint NOT NULL
);

CREATE UNLOGGED TABLE core_prefix_counts (
    prefix text NOT NULL,
    root text GENERATED ALWAYS AS (split_part(prefix, '.'::text, 1)) STORED,
    documents bigint NOT NULL,
    last_write timestamp with time zone
);

CREATE UNLOGGED TABLE core_root_counts (
    root text NOT NULL,
    shard smallint NOT NULL,
    documents bigint DEFAULT 0 NOT NULL,
    namespaces bigint DEFAULT 0 NOT NULL,
    vectors bigint DEFAULT 0 NOT NULL
);

CREATE UNLOGGED TABLE core_store_shadow (
    prefix text NOT NULL,
    key text NOT NULL,
    expires_day date,
    value_hashes bigint[],
    hilo text
);

CREATE UNLOGGED TABLE core_token_dirty (
    thread_id text NOT NULL,
    claimed_at timestamp with time zone
);

CREATE UNLOGGED TABLE core_value_holders (
    value_hash bigint NOT NULL,
    cliente_id text NOT NULL,
    documents integer NOT NULL
);
ALTER TABLE ONLY core_capture_dead_letters
    ADD CONSTRAINT core_capture_dead_letters_pkey PRIMARY KEY (id);
ALTER TABLE ONLY core_capture_position
    ADD CONSTRAINT core_capture_position_pkey PRIMARY KEY (slot_name);
ALTER TABLE ONLY core_capture_recount_requests
    ADD CONSTRAINT core_capture_recount_requests_pkey PRIMARY KEY (slot_name);
ALTER TABLE ONLY core_checkpoint_shadow
    ADD CONSTRAINT core_checkpoint_shadow_pkey PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id);
ALTER TABLE ONLY core_expiry_days
    ADD CONSTRAINT core_expiry_days_pkey PRIMARY KEY (day, root);
ALTER TABLE ONLY core_prefix_counts
    ADD CONSTRAINT core_prefix_counts_pkey PRIMARY KEY (prefix);
ALTER TABLE ONLY core_root_counts
    ADD CONSTRAINT core_root_counts_pkey PRIMARY KEY (root, shard);
ALTER TABLE ONLY core_store_shadow
    ADD CONSTRAINT core_store_shadow_pkey PRIMARY KEY (prefix, key);
ALTER TABLE ONLY core_token_dirty
    ADD CONSTRAINT core_token_dirty_pkey PRIMARY KEY (thread_id);
ALTER TABLE ONLY core_value_holders
    ADD CONSTRAINT core_value_holders_pkey PRIMARY KEY (value_hash, cliente_id);
CREATE INDEX core_capture_dead_letters_open_idx ON core_capture_dead_letters USING btree (recorded_at) WHERE (recounted_at IS NULL);
CREATE INDEX core_checkpoint_shadow_subjects_idx ON core_checkpoint_shadow USING gin (subjects jsonb_path_ops);
CREATE INDEX core_checkpoint_shadow_thread_pattern_idx ON core_checkpoint_shadow USING btree (thread_id text_pattern_ops);
CREATE INDEX core_checkpoint_shadow_ts_idx ON core_checkpoint_shadow USING btree (ts, thread_id, checkpoint_ns, checkpoint_id);
CREATE INDEX core_prefix_counts_documents_idx ON core_prefix_counts USING btree (documents DESC, prefix);
CREATE INDEX core_prefix_counts_prefix_pattern_idx ON core_prefix_counts USING btree (prefix text_pattern_ops);
CREATE INDEX core_prefix_counts_root_documents_idx ON core_prefix_counts USING btree (root, documents DESC, prefix);
CREATE INDEX core_store_shadow_hilo_idx ON core_store_shadow USING btree (hilo) WHERE (hilo IS NOT NULL);
CREATE INDEX core_value_holders_cliente_idx ON core_value_holders USING btree (cliente_id);

-- The recount's staging tables (core.capture.follower.copy_sources): the agents' rows it counts from, copied in one
-- snapshot, emptied again before the recount commits.
CREATE UNLOGGED TABLE core_recount_store (
    prefix text, key text, value jsonb, updated_at timestamp with time zone, expires_at timestamp with time zone);
CREATE UNLOGGED TABLE core_recount_vectors (root text, vectors bigint);
CREATE UNLOGGED TABLE core_recount_checkpoints (
    thread_id text, checkpoint_ns text, checkpoint_id text, metadata jsonb, ts text);
CREATE UNLOGGED TABLE core_recount_threads (thread_id text);
