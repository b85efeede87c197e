-- The dashboard's own database (issue 52), cluster C: what the extraction (core/history/tool_calls.py) keeps from the
-- agents' checkpoint writes, and the Preferences page's rollups of it. Same tables, indexes, functions, type and
-- triggers as the agents'-side migrations 020, 021, 044, 047, 080, 081, 086 and 120 left them (pg_dump of a migrated
-- database, tidied), without their backfills: the extraction fills these tables from its watermark (an upgrade in
-- place copies the base tables and rebuilds the rollups with 047's backfill statements, docs/own-database-plan.md).
--
-- LOGGED, unlike 001's: the base tables are not derivable (a tool call whose writes a prune or a delete_thread
-- removed cannot be extracted again; core_usage_days keeps what deleted threads cost), and the six rollups are kept
-- by triggers in the same transactions as their base rows, which an unlogged table emptied by a crash would break.
--
-- The extraction decodes on the agents' side (core_checkpoint_payload and the other decoders stay there) and writes
-- here what it decoded: no decoder is needed in this database.

-- One signed change of core_tool_calls (+1 a row inserted, -1 a row deleted); thread_id is the row's own.
CREATE TYPE core_tool_call_delta AS (
    tool text,
    day date,
    tipo text,
    clock text,
    subject text,
    cliente_id text,
    thread_id text,
    n integer
);

CREATE TABLE core_extract_watermark (
    name text NOT NULL,
    ts text DEFAULT ''::text NOT NULL,
    thread_id text DEFAULT ''::text NOT NULL,
    checkpoint_ns text DEFAULT ''::text NOT NULL,
    checkpoint_id text DEFAULT ''::text NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE core_message_no_usage (
    thread_id text NOT NULL,
    message_key text NOT NULL
);

CREATE TABLE core_message_usage (
    thread_id text NOT NULL,
    message_key text NOT NULL,
    checkpoint_ns text NOT NULL,
    checkpoint_id text NOT NULL,
    ts timestamp with time zone NOT NULL,
    clock text NOT NULL,
    agent text,
    cliente_id text,
    model text,
    input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL,
    cached_tokens bigint NOT NULL,
    CONSTRAINT core_message_usage_clock_check CHECK ((clock = ANY (ARRAY['checkpoint'::text, 'replayed'::text])))
);

CREATE TABLE core_refused_payloads (
    thread_id text NOT NULL,
    checkpoint_ns text NOT NULL,
    checkpoint_id text NOT NULL,
    kind text NOT NULL,
    item text NOT NULL,
    channel text,
    refused_type text NOT NULL,
    found_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT core_refused_payloads_kind_check CHECK ((kind = ANY (ARRAY['write'::text, 'blob'::text])))
);

CREATE TABLE core_thread_day_pairs (
    day date NOT NULL,
    prev_day date NOT NULL,
    threads bigint NOT NULL
);

CREATE TABLE core_thread_days (
    thread_id text NOT NULL,
    day date NOT NULL,
    first_human_at timestamp with time zone NOT NULL,
    last_human_at timestamp with time zone NOT NULL,
    cliente_id text
);

CREATE TABLE core_thread_last (
    thread_id text NOT NULL,
    last_human_at timestamp with time zone NOT NULL,
    cliente_id text
);

CREATE TABLE core_thread_summary (
    thread_id text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    checkpoint_id text NOT NULL,
    step integer,
    status text NOT NULL,
    agent text,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    refreshed_at timestamp with time zone DEFAULT now() NOT NULL,
    next_nodes text[] DEFAULT '{}'::text[] NOT NULL,
    CONSTRAINT core_thread_summary_status_check CHECK ((status = ANY (ARRAY['idle'::text, 'paused'::text, 'interrupted'::text, 'error'::text])))
);

CREATE TABLE core_tool_call_day_pairs (
    tool text NOT NULL,
    day date NOT NULL,
    tipo text NOT NULL,
    prev_day date NOT NULL,
    subjects bigint NOT NULL
);

CREATE TABLE core_tool_call_days (
    tool text NOT NULL,
    day date NOT NULL,
    tipo text NOT NULL,
    clock text NOT NULL,
    calls bigint NOT NULL
);

CREATE TABLE core_tool_call_subject_days (
    tool text NOT NULL,
    tipo text NOT NULL,
    subject text NOT NULL,
    day date NOT NULL,
    calls bigint NOT NULL,
    cliente_id text,
    thread_id text
);

CREATE TABLE core_tool_call_thread_days (
    thread_id text NOT NULL,
    tool text NOT NULL,
    day date NOT NULL,
    first_ts timestamp with time zone NOT NULL,
    calls bigint NOT NULL,
    tipos text[] NOT NULL,
    agent text,
    cliente_id text
);

CREATE TABLE core_tool_calls (
    thread_id text NOT NULL,
    checkpoint_ns text NOT NULL,
    checkpoint_id text NOT NULL,
    task_id text NOT NULL,
    idx integer NOT NULL,
    "position" integer NOT NULL,
    call_index integer NOT NULL,
    ts timestamp with time zone NOT NULL,
    clock text NOT NULL,
    tool text NOT NULL,
    args jsonb,
    call_id text,
    cliente_id text,
    agent text,
    extracted_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT core_tool_calls_clock_check CHECK ((clock = ANY (ARRAY['checkpoint'::text, 'replayed'::text])))
);

CREATE TABLE core_usage_days (
    day date NOT NULL,
    agent text NOT NULL,
    model text NOT NULL,
    messages bigint NOT NULL,
    input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL,
    cached_tokens bigint NOT NULL
);

CREATE TABLE core_usage_threads (
    thread_id text NOT NULL,
    model text NOT NULL,
    agent text NOT NULL,
    messages bigint NOT NULL,
    input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL,
    cached_tokens bigint NOT NULL,
    last_ts timestamp with time zone NOT NULL
);

ALTER TABLE ONLY core_extract_watermark
    ADD CONSTRAINT core_extract_watermark_pkey PRIMARY KEY (name);
ALTER TABLE ONLY core_message_no_usage
    ADD CONSTRAINT core_message_no_usage_pkey PRIMARY KEY (thread_id, message_key);
ALTER TABLE ONLY core_message_usage
    ADD CONSTRAINT core_message_usage_pkey PRIMARY KEY (thread_id, message_key);
ALTER TABLE ONLY core_refused_payloads
    ADD CONSTRAINT core_refused_payloads_pkey PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, kind, item);
ALTER TABLE ONLY core_thread_day_pairs
    ADD CONSTRAINT core_thread_day_pairs_pkey PRIMARY KEY (day, prev_day);
ALTER TABLE ONLY core_thread_days
    ADD CONSTRAINT core_thread_days_pkey PRIMARY KEY (thread_id, day);
ALTER TABLE ONLY core_thread_last
    ADD CONSTRAINT core_thread_last_pkey PRIMARY KEY (thread_id);
ALTER TABLE ONLY core_thread_summary
    ADD CONSTRAINT core_thread_summary_pkey PRIMARY KEY (thread_id);
ALTER TABLE ONLY core_tool_call_day_pairs
    ADD CONSTRAINT core_tool_call_day_pairs_pkey PRIMARY KEY (tool, day, tipo, prev_day);
ALTER TABLE ONLY core_tool_call_days
    ADD CONSTRAINT core_tool_call_days_pkey PRIMARY KEY (tool, day, tipo, clock);
ALTER TABLE ONLY core_tool_call_subject_days
    ADD CONSTRAINT core_tool_call_subject_days_pkey PRIMARY KEY (tool, tipo, subject, day);
ALTER TABLE ONLY core_tool_call_thread_days
    ADD CONSTRAINT core_tool_call_thread_days_pkey PRIMARY KEY (thread_id, tool, day);
ALTER TABLE ONLY core_tool_calls
    ADD CONSTRAINT core_tool_calls_pkey PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, "position", call_index);
ALTER TABLE ONLY core_usage_days
    ADD CONSTRAINT core_usage_days_pkey PRIMARY KEY (day, agent, model);
ALTER TABLE ONLY core_usage_threads
    ADD CONSTRAINT core_usage_threads_pkey PRIMARY KEY (thread_id, model);

CREATE INDEX core_message_usage_cliente_idx ON core_message_usage USING btree (cliente_id) WHERE (cliente_id IS NOT NULL);
CREATE INDEX core_thread_days_cliente_idx ON core_thread_days USING btree (cliente_id) WHERE (cliente_id IS NOT NULL);
CREATE INDEX core_thread_days_day_idx ON core_thread_days USING btree (day);
CREATE INDEX core_thread_days_last_idx ON core_thread_days USING btree (last_human_at DESC);
CREATE INDEX core_thread_last_cliente_idx ON core_thread_last USING btree (cliente_id) WHERE (cliente_id IS NOT NULL);
CREATE INDEX core_thread_last_recent_idx ON core_thread_last USING btree (last_human_at DESC, thread_id);
CREATE INDEX core_thread_summary_agent_idx ON core_thread_summary USING btree (agent, updated_at, thread_id);
CREATE INDEX core_thread_summary_created_idx ON core_thread_summary USING btree (created_at, thread_id);
CREATE INDEX core_thread_summary_metadata_idx ON core_thread_summary USING gin (metadata jsonb_path_ops);
CREATE INDEX core_thread_summary_refreshed_idx ON core_thread_summary USING btree (refreshed_at);
CREATE INDEX core_thread_summary_status_idx ON core_thread_summary USING btree (status, updated_at, thread_id) WHERE (status <> 'idle'::text);
CREATE INDEX core_thread_summary_updated_idx ON core_thread_summary USING btree (updated_at, thread_id);
CREATE INDEX core_tool_call_subject_days_cliente_idx ON core_tool_call_subject_days USING btree (cliente_id) WHERE (cliente_id IS NOT NULL);
CREATE INDEX core_tool_call_subject_days_thread_idx ON core_tool_call_subject_days USING btree (thread_id) WHERE (thread_id IS NOT NULL);
CREATE INDEX core_tool_call_thread_days_cliente_idx ON core_tool_call_thread_days USING btree (cliente_id) WHERE (cliente_id IS NOT NULL);
CREATE INDEX core_tool_call_thread_days_first_idx ON core_tool_call_thread_days USING btree (tool, first_ts DESC, thread_id);
CREATE INDEX core_tool_calls_cliente_idx ON core_tool_calls USING btree (cliente_id) WHERE (cliente_id IS NOT NULL);
CREATE INDEX core_tool_calls_tool_ts_idx ON core_tool_calls USING btree (tool, ts);

CREATE FUNCTION core_preference_rollups_lock()
 RETURNS trigger
 LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('core_preference_rollups'), 0);
    RETURN NULL;
END $$;

CREATE FUNCTION core_tool_call_pairs_of(tools text[], tipos text[], subjects text[])
 RETURNS TABLE(tool text, tipo text, day date, prev_day date)
 LANGUAGE sql
 STABLE
AS $$
    SELECT b.tool, b.tipo, b.day,
           lag(b.day, 1, '-infinity'::date) OVER (PARTITION BY b.tool, b.tipo, b.subject ORDER BY b.day)
    FROM (SELECT DISTINCT * FROM unnest(tools, tipos, subjects) AS k(tool, tipo, subject)) k
    JOIN core_tool_call_subject_days b ON b.tool = k.tool AND b.tipo = k.tipo AND b.subject = k.subject
$$;

CREATE FUNCTION core_tool_call_rollups_apply(delta core_tool_call_delta[])
 RETURNS void
 LANGUAGE plpgsql
AS $$
DECLARE
    k_tools text[];
    k_tipos text[];
    k_subjects text[];
    b_tools text[];
    b_tipos text[];
    b_days date[];
    b_prev date[];
    z_tools text[];
    z_days date[];
    z_tipos text[];
    z_prev date[];
BEGIN
    IF coalesce(cardinality(delta), 0) = 0 THEN
        RETURN;
    END IF;
    -- calls per day
    INSERT INTO core_tool_call_days AS t (tool, day, tipo, clock, calls)
    SELECT tool, day, tipo, clock, sum(n) FROM unnest(delta)
    GROUP BY 1, 2, 3, 4 HAVING sum(n) <> 0 ORDER BY 1, 2, 3, 4
    ON CONFLICT (tool, day, tipo, clock) DO UPDATE SET calls = t.calls + EXCLUDED.calls;
    DELETE FROM core_tool_call_days t USING (SELECT DISTINCT tool, day, tipo, clock FROM unnest(delta)) k
    WHERE t.tool = k.tool AND t.day = k.day AND t.tipo = k.tipo AND t.clock = k.clock AND t.calls <= 0;

    -- subject-days and their day pairs: the touched keys' pairs before the change out, after it in
    SELECT array_agg(tool), array_agg(tipo), array_agg(subject) INTO k_tools, k_tipos, k_subjects
    FROM (SELECT DISTINCT tool, tipo, subject FROM unnest(delta)) k;
    SELECT array_agg(tool), array_agg(tipo), array_agg(day), array_agg(prev_day) INTO b_tools, b_tipos, b_days, b_prev
    FROM core_tool_call_pairs_of(k_tools, k_tipos, k_subjects);
    INSERT INTO core_tool_call_subject_days AS b (tool, tipo, subject, day, calls, cliente_id, thread_id)
    SELECT tool, tipo, subject, day, sum(n), max(cliente_id), max(CASE WHEN cliente_id IS NULL THEN thread_id END)
    FROM unnest(delta)
    GROUP BY 1, 2, 3, 4 HAVING sum(n) <> 0 ORDER BY 1, 2, 3, 4
    ON CONFLICT (tool, tipo, subject, day) DO UPDATE
    SET calls = b.calls + EXCLUDED.calls, cliente_id = coalesce(b.cliente_id, EXCLUDED.cliente_id),
        thread_id = coalesce(b.thread_id, EXCLUDED.thread_id);
    DELETE FROM core_tool_call_subject_days b USING (SELECT DISTINCT tool, tipo, subject, day FROM unnest(delta)) k
    WHERE b.tool = k.tool AND b.tipo = k.tipo AND b.subject = k.subject AND b.day = k.day AND b.calls <= 0;
    WITH pairs AS (
        SELECT tool, tipo, day, prev_day, -1 AS n FROM unnest(b_tools, b_tipos, b_days, b_prev) AS o(tool, tipo, day, prev_day)
        UNION ALL
        SELECT tool, tipo, day, prev_day, 1 FROM core_tool_call_pairs_of(k_tools, k_tipos, k_subjects)
    ), up AS (
        INSERT INTO core_tool_call_day_pairs AS p (tool, day, tipo, prev_day, subjects)
        SELECT tool, day, tipo, prev_day, sum(n) FROM pairs GROUP BY 1, 2, 3, 4 HAVING sum(n) <> 0 ORDER BY 1, 2, 3, 4
        ON CONFLICT (tool, day, tipo, prev_day) DO UPDATE SET subjects = p.subjects + EXCLUDED.subjects
        RETURNING p.tool, p.day, p.tipo, p.prev_day, p.subjects
    )
    SELECT array_agg(tool), array_agg(day), array_agg(tipo), array_agg(prev_day) INTO z_tools, z_days, z_tipos, z_prev
    FROM up WHERE up.subjects <= 0;
    IF z_tools IS NOT NULL THEN
        DELETE FROM core_tool_call_day_pairs p USING unnest(z_tools, z_days, z_tipos, z_prev) AS z(tool, day, tipo, prev_day)
        WHERE p.tool = z.tool AND p.day = z.day AND p.tipo = z.tipo AND p.prev_day = z.prev_day AND p.subjects <= 0;
    END IF;

    -- per thread-day summaries: recomputed from core_tool_calls for the thread-days touched
    INSERT INTO core_tool_call_thread_days AS s (thread_id, tool, day, first_ts, calls, tipos, agent, cliente_id)
    SELECT k.thread_id, k.tool, k.day, min(c.ts), count(*),
           coalesce(array_agg(DISTINCT c.args ->> 'tipo') FILTER (WHERE c.args ->> 'tipo' IS NOT NULL), '{}'),
           max(c.agent), max(c.cliente_id)
    FROM (SELECT DISTINCT d.thread_id, d.tool, d.day FROM unnest(delta) d) k
    JOIN core_tool_calls c ON c.thread_id = k.thread_id AND c.tool = k.tool
     AND c.ts >= k.day::timestamp AT TIME ZONE 'UTC' AND c.ts < (k.day + 1)::timestamp AT TIME ZONE 'UTC'
    GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
    ON CONFLICT (thread_id, tool, day) DO UPDATE
    SET first_ts = EXCLUDED.first_ts, calls = EXCLUDED.calls, tipos = EXCLUDED.tipos, agent = EXCLUDED.agent,
        cliente_id = EXCLUDED.cliente_id;
    DELETE FROM core_tool_call_thread_days s USING (SELECT DISTINCT d.thread_id, d.tool, d.day FROM unnest(delta) d) k
    WHERE s.thread_id = k.thread_id AND s.tool = k.tool AND s.day = k.day
      AND NOT EXISTS (SELECT 1 FROM core_tool_calls c WHERE c.thread_id = k.thread_id AND c.tool = k.tool
                        AND c.ts >= k.day::timestamp AT TIME ZONE 'UTC'
                        AND c.ts < (k.day + 1)::timestamp AT TIME ZONE 'UTC');
END $$;

CREATE FUNCTION core_tool_calls_rollup()
 RETURNS trigger
 LANGUAGE plpgsql
AS $$
DECLARE
    delta core_tool_call_delta[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(ROW(r.tool, (r.ts AT TIME ZONE 'UTC')::date, coalesce(r.args ->> 'tipo', '?'), r.clock,
                             coalesce(r.cliente_id, 'thread:' || r.thread_id), r.cliente_id, r.thread_id, 1)::core_tool_call_delta)
        INTO delta FROM new_rows r;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(ROW(r.tool, (r.ts AT TIME ZONE 'UTC')::date, coalesce(r.args ->> 'tipo', '?'), r.clock,
                             coalesce(r.cliente_id, 'thread:' || r.thread_id), r.cliente_id, r.thread_id, -1)::core_tool_call_delta)
        INTO delta FROM old_rows r;
    ELSE
        SELECT array_agg(x) INTO delta FROM (
            SELECT ROW(r.tool, (r.ts AT TIME ZONE 'UTC')::date, coalesce(r.args ->> 'tipo', '?'), r.clock,
                       coalesce(r.cliente_id, 'thread:' || r.thread_id), r.cliente_id, r.thread_id, -1)::core_tool_call_delta AS x
            FROM old_rows r
            UNION ALL
            SELECT ROW(r.tool, (r.ts AT TIME ZONE 'UTC')::date, coalesce(r.args ->> 'tipo', '?'), r.clock,
                       coalesce(r.cliente_id, 'thread:' || r.thread_id), r.cliente_id, r.thread_id, 1)::core_tool_call_delta
            FROM new_rows r) u;
    END IF;
    PERFORM core_tool_call_rollups_apply(delta);
    RETURN NULL;
END $$;

CREATE FUNCTION core_tool_calls_rollup_truncate()
 RETURNS trigger
 LANGUAGE plpgsql
AS $$
BEGIN
    TRUNCATE core_tool_call_days, core_tool_call_subject_days, core_tool_call_day_pairs, core_tool_call_thread_days;
    RETURN NULL;
END $$;

CREATE FUNCTION core_thread_days_apply(old_threads text[], old_days date[], new_threads text[], new_days date[])
 RETURNS void
 LANGUAGE plpgsql
AS $$
DECLARE
    threads text[];
    zero_days date[];
    zero_prev date[];
BEGIN
    SELECT array_agg(DISTINCT t) INTO threads FROM unnest(coalesce(old_threads, '{}') || coalesce(new_threads, '{}')) t;
    IF threads IS NULL THEN
        RETURN;
    END IF;
    -- day pairs: those of the touched threads before the change out, those after it in
    WITH cur AS (
        SELECT d.thread_id, d.day FROM core_thread_days d WHERE d.thread_id = ANY(threads)
    ), before AS (
        (SELECT thread_id, day FROM cur
         EXCEPT SELECT thread_id, day FROM unnest(new_threads, new_days) AS n(thread_id, day))
        UNION SELECT thread_id, day FROM unnest(old_threads, old_days) AS o(thread_id, day)
    ), pairs AS (
        SELECT day, lag(day, 1, '-infinity'::date) OVER (PARTITION BY thread_id ORDER BY day) AS prev_day, -1 AS n
        FROM before
        UNION ALL
        SELECT day, lag(day, 1, '-infinity'::date) OVER (PARTITION BY thread_id ORDER BY day), 1 FROM cur
    ), up AS (
        INSERT INTO core_thread_day_pairs AS p (day, prev_day, threads)
        SELECT day, prev_day, sum(n) FROM pairs GROUP BY 1, 2 HAVING sum(n) <> 0 ORDER BY 1, 2
        ON CONFLICT (day, prev_day) DO UPDATE SET threads = p.threads + EXCLUDED.threads
        RETURNING p.day, p.prev_day, p.threads
    )
    SELECT array_agg(day), array_agg(prev_day) INTO zero_days, zero_prev FROM up WHERE up.threads <= 0;
    IF zero_days IS NOT NULL THEN
        DELETE FROM core_thread_day_pairs p USING unnest(zero_days, zero_prev) AS z(day, prev_day)
        WHERE p.day = z.day AND p.prev_day = z.prev_day AND p.threads <= 0;
    END IF;
    -- latest human message per thread
    INSERT INTO core_thread_last AS l (thread_id, last_human_at, cliente_id)
    SELECT thread_id, max(last_human_at), max(cliente_id) FROM core_thread_days WHERE thread_id = ANY(threads)
    GROUP BY 1 ORDER BY 1
    ON CONFLICT (thread_id) DO UPDATE SET last_human_at = EXCLUDED.last_human_at, cliente_id = EXCLUDED.cliente_id
    WHERE (l.last_human_at, l.cliente_id) IS DISTINCT FROM (EXCLUDED.last_human_at, EXCLUDED.cliente_id);
    DELETE FROM core_thread_last l WHERE l.thread_id = ANY(threads)
      AND NOT EXISTS (SELECT 1 FROM core_thread_days d WHERE d.thread_id = l.thread_id);
END $$;

CREATE FUNCTION core_thread_days_rollup()
 RETURNS trigger
 LANGUAGE plpgsql
AS $$
DECLARE
    old_threads text[];
    old_days date[];
    new_threads text[];
    new_days date[];
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        SELECT array_agg(thread_id), array_agg(day) INTO old_threads, old_days FROM old_rows;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        SELECT array_agg(thread_id), array_agg(day) INTO new_threads, new_days FROM new_rows;
    END IF;
    PERFORM core_thread_days_apply(old_threads, old_days, new_threads, new_days);
    RETURN NULL;
END $$;

CREATE FUNCTION core_thread_days_rollup_truncate()
 RETURNS trigger
 LANGUAGE plpgsql
AS $$
BEGIN
    TRUNCATE core_thread_last, core_thread_day_pairs;
    RETURN NULL;
END $$;

CREATE TRIGGER core_preference_rollups_lock BEFORE INSERT OR DELETE OR UPDATE OR TRUNCATE ON core_thread_days FOR EACH STATEMENT EXECUTE FUNCTION core_preference_rollups_lock();
CREATE TRIGGER core_preference_rollups_lock BEFORE INSERT OR DELETE OR UPDATE OR TRUNCATE ON core_tool_calls FOR EACH STATEMENT EXECUTE FUNCTION core_preference_rollups_lock();
CREATE TRIGGER core_thread_days_rollup_del AFTER DELETE ON core_thread_days REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION core_thread_days_rollup();
CREATE TRIGGER core_thread_days_rollup_ins AFTER INSERT ON core_thread_days REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION core_thread_days_rollup();
CREATE TRIGGER core_thread_days_rollup_trunc AFTER TRUNCATE ON core_thread_days FOR EACH STATEMENT EXECUTE FUNCTION core_thread_days_rollup_truncate();
CREATE TRIGGER core_thread_days_rollup_upd AFTER UPDATE ON core_thread_days REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION core_thread_days_rollup();
CREATE TRIGGER core_tool_calls_rollup_del AFTER DELETE ON core_tool_calls REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION core_tool_calls_rollup();
CREATE TRIGGER core_tool_calls_rollup_ins AFTER INSERT ON core_tool_calls REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION core_tool_calls_rollup();
CREATE TRIGGER core_tool_calls_rollup_trunc AFTER TRUNCATE ON core_tool_calls FOR EACH STATEMENT EXECUTE FUNCTION core_tool_calls_rollup_truncate();
CREATE TRIGGER core_tool_calls_rollup_upd AFTER UPDATE ON core_tool_calls REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION core_tool_calls_rollup();

REVOKE ALL ON FUNCTION core_preference_rollups_lock() FROM PUBLIC;
REVOKE ALL ON FUNCTION core_tool_call_pairs_of(text[], text[], text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION core_tool_call_rollups_apply(core_tool_call_delta[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION core_tool_calls_rollup() FROM PUBLIC;
REVOKE ALL ON FUNCTION core_tool_calls_rollup_truncate() FROM PUBLIC;
REVOKE ALL ON FUNCTION core_thread_days_apply(text[], date[], text[], date[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION core_thread_days_rollup() FROM PUBLIC;
REVOKE ALL ON FUNCTION core_thread_days_rollup_truncate() FROM PUBLIC;
