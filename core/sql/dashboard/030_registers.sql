-- The dashboard's own database (issue 52), cluster E: the registers and their hash chains, the log of who viewed a
-- customer's data, and the erasure's own records (proofs, physical settling, needles). Same tables, view, functions
-- and triggers as the agents'-side migrations 004-170 left them (pg_dump of a migrated database, tidied), with no
-- rows: an upgrade in place copies them with their ids and chain links (docs/own-database-plan.md, section 5).
--
-- Logged, all of it: the registers are evidence (not derivable from anything), the views log and its gaps too; the
-- writers' markers are a few rows per running process.

CREATE FUNCTION core_purpose_names(purpose text, customer text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
    SELECT purpose IS NOT NULL AND customer IS NOT NULL AND customer <> ''
       AND strpos(lower(purpose), lower(customer)) > 0  -- cheap test first; then the id as a whole word
       AND purpose ~* ('(^|[^[:alnum:]_])' || regexp_replace(customer, '([].^$*+?(){}|\\[-])', '\\\1', 'g')
                       || '($|[^[:alnum:]_])')
$_$;

CREATE FUNCTION core_register_content(tbl text, rid bigint) RETURNS text
    LANGUAGE plpgsql STABLE
    SET "TimeZone" TO 'UTC'
    SET extra_float_digits TO '1'
    SET "DateStyle" TO 'ISO, YMD'
    AS $$
-- The canonical text of one register row (NULL if it does not exist). Fixed settings so that the
-- text is the same whoever reads it (to_jsonb renders timestamptz in the session's TimeZone).
DECLARE
    doc jsonb;
BEGIN
    IF tbl = 'core_access_register' THEN
        SELECT jsonb_strip_nulls(to_jsonb(r)) INTO doc FROM core_access_register r WHERE r.id = rid;
    ELSIF tbl = 'core_erasure_register' THEN
        SELECT jsonb_strip_nulls(to_jsonb(r) - 'last_recheck_at' - 'last_recheck_clean' - 'resumed_by') INTO doc
        FROM core_erasure_register r WHERE r.id = rid;
    ELSIF tbl = 'core_erasure_rechecks' THEN
        SELECT jsonb_strip_nulls(to_jsonb(r)) INTO doc FROM core_erasure_rechecks r WHERE r.id = rid;
    ELSIF tbl = 'core_register_redactions' THEN
        SELECT jsonb_strip_nulls(to_jsonb(r)) INTO doc FROM core_register_redactions r WHERE r.id = rid;
    ELSIF tbl = 'core_data_views' THEN
        SELECT jsonb_strip_nulls(to_jsonb(r)) INTO doc FROM core_data_views r WHERE r.id = rid;
    ELSE
        RAISE EXCEPTION 'not a sealed register table: %', tbl;
    END IF;
    RETURN doc::text;
END $$;

CREATE FUNCTION core_register_link_content(tbl text, rid bigint, sealed_keys text[]) RETURNS text
    LANGUAGE plpgsql STABLE
    SET "TimeZone" TO 'UTC'
    SET extra_float_digits TO '1'
    SET "DateStyle" TO 'ISO, YMD'
    AS $_$
-- The text a chain link's content_sha256 is the hash of (NULL if the row does not exist): today's canonical
-- content when sealed_keys is NULL, else the first 036 text's: the row as jsonb, nulls kept, only the keys
-- in sealed_keys, resumed_by as it was when the row became final (null).
DECLARE
    doc jsonb;
BEGIN
    IF sealed_keys IS NULL THEN
        RETURN core_register_content(tbl, rid);
    ELSIF tbl NOT IN ('core_access_register', 'core_erasure_register', 'core_erasure_rechecks') THEN
        RAISE EXCEPTION 'not a sealed register table: %', tbl;
    END IF;
    EXECUTE format('SELECT to_jsonb(r) FROM %I r WHERE r.id = $1', tbl) INTO doc USING rid;
    SELECT jsonb_object_agg(key, CASE WHEN key = 'resumed_by' THEN 'null'::jsonb ELSE value END) INTO doc
    FROM jsonb_each(doc) WHERE key = ANY (sealed_keys);
    RETURN doc::text;
END $_$;

CREATE FUNCTION core_register_seal(chain_name text, tbl text, rid bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
-- As 036's, but a chain whose links were all cut by retention goes on from its last cut.
DECLARE
    content text := core_register_content(tbl, rid);
    content_hash text := encode(sha256(convert_to(content, 'UTF8')), 'hex');
    last record;
    prev text;
BEGIN
    IF EXISTS (SELECT 1 FROM core_register_chain c WHERE c.table_name = tbl AND c.row_id = rid) THEN
        RETURN;  -- sealed once; a later change is what verification is there to catch
    END IF;
    -- one sealer per chain at a time: two concurrent seals must not both link to the same head
    PERFORM pg_advisory_xact_lock(hashtext('core_register_chain'), hashtext(chain_name));
    SELECT position, row_hash INTO last FROM core_register_chain c
    WHERE c.chain = chain_name ORDER BY position DESC LIMIT 1;
    IF last.position IS NULL THEN
        SELECT position, row_hash INTO last FROM core_register_cuts k
        WHERE k.chain = chain_name ORDER BY position DESC LIMIT 1;
    END IF;
    prev := coalesce(last.row_hash, '');
    INSERT INTO core_register_chain (chain, position, table_name, row_id, content_sha256, prev_hash, row_hash)
    VALUES (chain_name, coalesce(last.position, 0) + 1, tbl, rid, content_hash, prev,
            encode(sha256(convert_to(prev || '|' || tbl || '|' || rid::text || '|' || content_hash, 'UTF8')), 'hex'));
END $$;

CREATE FUNCTION core_register_seal_trigger() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM core_register_seal(TG_ARGV[0], TG_TABLE_NAME::text, NEW.id);
    RETURN NULL;
END $$;

CREATE FUNCTION core_redact_view_purposes(customer text, threads text[], request_id bigint) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    v      record;
    was    text;
    marker text := format('[redacted: erasure request #%s]', request_id);
    n      bigint := 0;
BEGIN
    IF customer IS NULL OR btrim(customer) = '' THEN
        RAISE EXCEPTION 'core_redact_view_purposes: a customer id is required' USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM core_erasure_register r WHERE r.id = request_id AND r.customer_id = customer) THEN
        RAISE EXCEPTION 'core_redact_view_purposes: % is not an erasure request of customer %', request_id, customer
            USING ERRCODE = '22023';
    END IF;
    FOR v IN SELECT d.id, c.content_sha256 AS sealed,
                    core_register_link_content(c.table_name, c.row_id, c.sealed_keys) AS content
             FROM core_data_views d
             LEFT JOIN core_register_chain c ON c.table_name = 'core_data_views' AND c.row_id = d.id
             WHERE (d.customer_id = customer OR (d.kind = 'thread' AND d.target = ANY (coalesce(threads, '{}')))
                    OR core_purpose_names(d.purpose, customer))
               AND d.purpose IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM core_register_redactions r
                               WHERE r.table_name = 'core_data_views' AND r.row_id = d.id)
             ORDER BY d.id
             FOR UPDATE OF d LOOP
        was := encode(sha256(convert_to(v.content, 'UTF8')), 'hex');
        UPDATE core_data_views SET purpose = marker WHERE id = v.id;
        IF v.sealed IS NOT NULL THEN  -- sealed on insert: always, unless its link was deleted (the verifier says so)
            INSERT INTO core_register_redactions (table_name, row_id, fields, sealed_sha256, intact, redacted_sha256,
                                                  reason)
            SELECT 'core_data_views', v.id, ARRAY['purpose'], v.sealed, was = v.sealed,
                   encode(sha256(convert_to(core_register_link_content(c.table_name, c.row_id, c.sealed_keys), 'UTF8')),
                          'hex'),
                   format('erasure request #%s: the purpose typed when viewing the customer may hold their personal '
                          'data (typed on a view of this customer, or naming them); replaced by a marker', request_id)
            FROM core_register_chain c WHERE c.table_name = 'core_data_views' AND c.row_id = v.id;
        END IF;
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;

CREATE TABLE core_access_register (
    id bigint NOT NULL,
    customer_id text NOT NULL,
    operator text NOT NULL,
    exported_at timestamp with time zone DEFAULT now() NOT NULL,
    format text NOT NULL,
    lang text NOT NULL,
    sha256 text NOT NULL,
    size_bytes bigint NOT NULL,
    counts jsonb NOT NULL,
    sources jsonb NOT NULL,
    CONSTRAINT core_access_register_format_check CHECK ((format = ANY (ARRAY['json'::text, 'html'::text]))),
    CONSTRAINT core_access_register_sha256_check CHECK ((sha256 ~ '^[0-9a-f]{64}$'::text))
);

CREATE SEQUENCE core_access_register_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE core_access_register_id_seq OWNED BY core_access_register.id;

CREATE TABLE core_data_view_gaps (
    id bigint NOT NULL,
    views bigint,
    since timestamp with time zone NOT NULL,
    until timestamp with time zone NOT NULL,
    process text NOT NULL,
    reason text NOT NULL,
    recorded_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT core_data_view_gaps_check CHECK ((until >= since)),
    CONSTRAINT core_data_view_gaps_views_check CHECK ((views > 0))
);

CREATE SEQUENCE core_data_view_gaps_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE core_data_view_gaps_id_seq OWNED BY core_data_view_gaps.id;

CREATE TABLE core_data_view_writers (
    process text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    started_at timestamp with time zone NOT NULL,
    flushed_through timestamp with time zone NOT NULL,
    heartbeat_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE core_data_views (
    id bigint NOT NULL,
    viewed_at timestamp with time zone DEFAULT now() NOT NULL,
    viewer text NOT NULL,
    role text NOT NULL,
    kind text NOT NULL,
    customer_id text,
    target text NOT NULL,
    purpose text,
    CONSTRAINT core_data_views_kind_check CHECK ((kind = ANY (ARRAY['namespace'::text, 'thread'::text, 'search'::text, 'access_preview'::text, 'access_export'::text, 'refused'::text]))),
    CONSTRAINT core_data_views_viewer_check CHECK ((viewer <> ''::text))
);

CREATE SEQUENCE core_data_views_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE core_data_views_id_seq OWNED BY core_data_views.id;

CREATE TABLE core_erasure_needles (
    request_id bigint NOT NULL,
    needles jsonb NOT NULL,
    erased_lsn pg_lsn,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE core_erasure_physical (
    request_id bigint NOT NULL,
    t_sql_zero timestamp with time zone,
    steps jsonb NOT NULL,
    files jsonb NOT NULL,
    files_status text NOT NULL,
    files_note text,
    t_files_overwritten timestamp with time zone,
    wal jsonb NOT NULL,
    backup_retention_days integer,
    t_wal_backup_horizon timestamp with time zone,
    horizon_note text,
    first_steps_at timestamp with time zone NOT NULL,
    settled_at timestamp with time zone NOT NULL,
    attempts integer DEFAULT 1 NOT NULL,
    CONSTRAINT core_erasure_physical_files_status_check CHECK ((files_status = ANY (ARRAY['overwritten'::text, 'in free space until reused or rewritten'::text, 'not measured'::text]))),
    CONSTRAINT core_erasure_physical_overwritten_measured CHECK (((files_status = 'overwritten'::text) = (t_files_overwritten IS NOT NULL)))
);

CREATE TABLE core_erasure_proofs (
    request_id bigint NOT NULL,
    tables text[] NOT NULL,
    found jsonb DEFAULT '[]'::jsonb NOT NULL,
    unproven text[] DEFAULT '{}'::text[] NOT NULL,
    clean boolean NOT NULL,
    ran_ms integer NOT NULL,
    proved_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE core_erasure_rechecks (
    id bigint NOT NULL,
    request_id bigint NOT NULL,
    checked_at timestamp with time zone DEFAULT now() NOT NULL,
    trigger text NOT NULL,
    operator text,
    clean boolean NOT NULL,
    counts jsonb NOT NULL,
    evidence jsonb NOT NULL
);

CREATE SEQUENCE core_erasure_rechecks_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE core_erasure_rechecks_id_seq OWNED BY core_erasure_rechecks.id;

CREATE TABLE core_erasure_register (
    id bigint NOT NULL,
    customer_id text NOT NULL,
    namespace_prefix text NOT NULL,
    operator text NOT NULL,
    requested_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    status text DEFAULT 'running'::text NOT NULL,
    passes integer DEFAULT 0 NOT NULL,
    thread_ids text[] DEFAULT '{}'::text[] NOT NULL,
    counts_before jsonb DEFAULT '{}'::jsonb NOT NULL,
    deleted jsonb DEFAULT '{}'::jsonb NOT NULL,
    counts_after jsonb,
    evidence jsonb,
    report text,
    last_recheck_at timestamp with time zone,
    last_recheck_clean boolean,
    sources jsonb,
    residue jsonb,
    residue_terms jsonb,
    exclusions jsonb,
    resumed_by bigint,
    term_salt text,
    residue_terms_dropped_at timestamp with time zone,
    CONSTRAINT core_erasure_register_status_check CHECK ((status = ANY (ARRAY['running'::text, 'complete'::text, 'incomplete'::text, 'failed'::text, 'interrupted'::text])))
);

CREATE VIEW core_erasure_register_counts AS
 SELECT count(*) FILTER (WHERE (status = ANY (ARRAY['incomplete'::text, 'failed'::text]))) AS incomplete,
    count(*) FILTER (WHERE ((status = 'running'::text) AND (requested_at < (now() - '01:00:00'::interval)))) AS stuck,
    count(*) FILTER (WHERE ((status = 'complete'::text) AND (last_recheck_clean IS FALSE) AND (NOT (EXISTS ( SELECT 1
           FROM core_erasure_register n
          WHERE ((n.customer_id = r.customer_id) AND (ROW(n.requested_at, n.id) > ROW(r.requested_at, r.id)))))))) AS data_back,
    count(*) FILTER (WHERE (residue_terms_dropped_at IS NOT NULL)) AS terms_dropped
   FROM core_erasure_register r;

CREATE SEQUENCE core_erasure_register_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE core_erasure_register_id_seq OWNED BY core_erasure_register.id;

CREATE TABLE core_register_chain (
    chain text NOT NULL,
    "position" bigint NOT NULL,
    table_name text NOT NULL,
    row_id bigint NOT NULL,
    content_sha256 text NOT NULL,
    prev_hash text NOT NULL,
    row_hash text NOT NULL,
    sealed_at timestamp with time zone DEFAULT now() NOT NULL,
    sealed_keys text[]
);

CREATE TABLE core_register_cuts (
    chain text NOT NULL,
    "position" bigint NOT NULL,
    row_hash text NOT NULL,
    rows_deleted bigint NOT NULL,
    retention_days integer NOT NULL,
    cut_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE core_register_redactions (
    id bigint NOT NULL,
    table_name text NOT NULL,
    row_id bigint NOT NULL,
    fields text[] NOT NULL,
    sealed_sha256 text NOT NULL,
    intact boolean NOT NULL,
    redacted_sha256 text NOT NULL,
    reason text NOT NULL,
    redacted_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE SEQUENCE core_register_redactions_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE core_register_redactions_id_seq OWNED BY core_register_redactions.id;

ALTER TABLE ONLY core_access_register ALTER COLUMN id SET DEFAULT nextval('core_access_register_id_seq'::regclass);

ALTER TABLE ONLY core_data_view_gaps ALTER COLUMN id SET DEFAULT nextval('core_data_view_gaps_id_seq'::regclass);

ALTER TABLE ONLY core_data_views ALTER COLUMN id SET DEFAULT nextval('core_data_views_id_seq'::regclass);

ALTER TABLE ONLY core_erasure_rechecks ALTER COLUMN id SET DEFAULT nextval('core_erasure_rechecks_id_seq'::regclass);

ALTER TABLE ONLY core_erasure_register ALTER COLUMN id SET DEFAULT nextval('core_erasure_register_id_seq'::regclass);

ALTER TABLE ONLY core_register_redactions ALTER COLUMN id SET DEFAULT nextval('core_register_redactions_id_seq'::regclass);

ALTER TABLE ONLY core_access_register
    ADD CONSTRAINT core_access_register_pkey PRIMARY KEY (id);

ALTER TABLE ONLY core_data_view_gaps
    ADD CONSTRAINT core_data_view_gaps_pkey PRIMARY KEY (id);

ALTER TABLE ONLY core_data_view_writers
    ADD CONSTRAINT core_data_view_writers_pkey PRIMARY KEY (process);

ALTER TABLE ONLY core_data_views
    ADD CONSTRAINT core_data_views_pkey PRIMARY KEY (id);

ALTER TABLE ONLY core_erasure_needles
    ADD CONSTRAINT core_erasure_needles_pkey PRIMARY KEY (request_id);

ALTER TABLE ONLY core_erasure_physical
    ADD CONSTRAINT core_erasure_physical_pkey PRIMARY KEY (request_id);

ALTER TABLE ONLY core_erasure_proofs
    ADD CONSTRAINT core_erasure_proofs_pkey PRIMARY KEY (request_id);

ALTER TABLE ONLY core_erasure_rechecks
    ADD CONSTRAINT core_erasure_rechecks_pkey PRIMARY KEY (id);

ALTER TABLE ONLY core_erasure_register
    ADD CONSTRAINT core_erasure_register_pkey PRIMARY KEY (id);

ALTER TABLE ONLY core_register_chain
    ADD CONSTRAINT core_register_chain_pkey PRIMARY KEY (chain, "position");

ALTER TABLE ONLY core_register_chain
    ADD CONSTRAINT core_register_chain_table_name_row_id_key UNIQUE (table_name, row_id);

ALTER TABLE ONLY core_register_cuts
    ADD CONSTRAINT core_register_cuts_pkey PRIMARY KEY (chain, "position");

ALTER TABLE ONLY core_register_redactions
    ADD CONSTRAINT core_register_redactions_pkey PRIMARY KEY (id);

ALTER TABLE ONLY core_register_redactions
    ADD CONSTRAINT core_register_redactions_table_name_row_id_key UNIQUE (table_name, row_id);

CREATE INDEX core_access_register_customer_idx ON core_access_register USING btree (customer_id, exported_at);

CREATE INDEX core_data_view_gaps_until_idx ON core_data_view_gaps USING btree (until);

CREATE INDEX core_data_views_at_idx ON core_data_views USING btree (viewed_at);

CREATE INDEX core_data_views_customer_idx ON core_data_views USING btree (customer_id, viewed_at);

CREATE INDEX core_data_views_thread_idx ON core_data_views USING btree (target) WHERE (kind = 'thread'::text);

CREATE INDEX core_erasure_rechecks_request_idx ON core_erasure_rechecks USING btree (request_id, checked_at);

CREATE INDEX core_erasure_register_customer_idx ON core_erasure_register USING btree (customer_id, requested_at);

CREATE INDEX core_erasure_register_requested_idx ON core_erasure_register USING btree (requested_at);

CREATE TRIGGER core_access_register_seal AFTER INSERT ON core_access_register FOR EACH ROW EXECUTE FUNCTION core_register_seal_trigger('access');

CREATE TRIGGER core_data_views_seal AFTER INSERT ON core_data_views FOR EACH ROW EXECUTE FUNCTION core_register_seal_trigger('views');

CREATE TRIGGER core_erasure_rechecks_seal AFTER INSERT ON core_erasure_rechecks FOR EACH ROW EXECUTE FUNCTION core_register_seal_trigger('erasure');

CREATE TRIGGER core_erasure_register_seal_final AFTER UPDATE OF status ON core_erasure_register FOR EACH ROW WHEN (((old.status = 'running'::text) AND (new.status <> 'running'::text))) EXECUTE FUNCTION core_register_seal_trigger('erasure');

CREATE TRIGGER core_erasure_register_seal_insert AFTER INSERT ON core_erasure_register FOR EACH ROW WHEN ((new.status <> 'running'::text)) EXECUTE FUNCTION core_register_seal_trigger('erasure');

CREATE TRIGGER core_register_redactions_seal AFTER INSERT ON core_register_redactions FOR EACH ROW EXECUTE FUNCTION core_register_seal_trigger('erasure');

ALTER TABLE ONLY core_erasure_needles
    ADD CONSTRAINT core_erasure_needles_request_id_fkey FOREIGN KEY (request_id) REFERENCES core_erasure_register(id);

ALTER TABLE ONLY core_erasure_physical
    ADD CONSTRAINT core_erasure_physical_request_id_fkey FOREIGN KEY (request_id) REFERENCES core_erasure_register(id);

ALTER TABLE ONLY core_erasure_proofs
    ADD CONSTRAINT core_erasure_proofs_request_id_fkey FOREIGN KEY (request_id) REFERENCES core_erasure_register(id) ON DELETE CASCADE;

ALTER TABLE ONLY core_erasure_rechecks
    ADD CONSTRAINT core_erasure_rechecks_request_id_fkey FOREIGN KEY (request_id) REFERENCES core_erasure_register(id);

ALTER TABLE ONLY core_erasure_register
    ADD CONSTRAINT core_erasure_register_resumed_by_fkey FOREIGN KEY (resumed_by) REFERENCES core_erasure_register(id);

REVOKE ALL ON FUNCTION core_purpose_names(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION core_register_content(text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION core_register_link_content(text, bigint, text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION core_register_seal(text, text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION core_register_seal_trigger() FROM PUBLIC;
REVOKE ALL ON FUNCTION core_redact_view_purposes(text, text[], bigint) FROM PUBLIC;
