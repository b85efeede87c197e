-- Rollups of the extracted tool calls and thread-days (migration 020) for the Preferences page
-- (core/memory/preferences.py), kept exact by statement-level triggers on core_tool_calls and
-- core_thread_days (the pattern of 007_prefix_counts.sql / 040_expiry_days.sql), so every write path
-- (the extraction step, the sweep's pruning of deleted threads, an erasure, a TRUNCATE) keeps them.
-- Without them each page query read every `recordar_preferencia` call of the 30-day window (~485k rows
-- at 10M documents: 0.5-1.9 s each, BENCHMARKS.md) and grouped every thread-day to find the 500 most
-- recent threads. With them a page query reads rows per day (and per tipo), or LIMIT rows by index.
--
-- Distinct counts over a window (customers per tipo, conversations in the period) cannot be summed
-- from per-day distinct counts. They are exact here through "day pairs": for each subject (customer or
-- thread) and each day it was active, the previous day it was active. A subject is active in
-- [since, until] iff exactly one of its active days d in that range has prev_day < since (its first one
-- there), so count(DISTINCT subject) over the window = sum(n) over pairs with day in [since, until] and
-- prev_day < since: rows per (day, previous day), independent of the number of calls or customers.
--
-- Writers are serialized on one transaction-level advisory lock taken BEFORE each statement that writes
-- core_tool_calls or core_thread_days (the extraction step already takes turns on its watermark row):
-- the per-thread and per-subject rows below are recomputed from their base rows, which must not change
-- under a concurrent writer's feet.

-- Calls per tool, UTC day (of core_tool_calls.ts), tipo and clock: preference_daily, preference_by_tipo
-- (writes), clocks. No customer in it.
CREATE TABLE IF NOT EXISTS core_tool_call_days (
    tool   text   NOT NULL,
    day    date   NOT NULL,   -- (ts AT TIME ZONE 'UTC')::date
    tipo   text   NOT NULL,   -- coalesce(args ->> 'tipo', '?'), as preference_by_tipo groups it
    clock  text   NOT NULL,
    calls  bigint NOT NULL,
    PRIMARY KEY (tool, day, tipo, clock)
);

-- Calls per tool, tipo, subject (the customer, or 'thread:' || thread_id without one, as the page counts
-- customers) and UTC day: the base of the day pairs below. Names the customer (cliente_id) or the thread
-- (thread_id, only when there is no cliente_id): an erasure counts it in its evidence; it is emptied by
-- the triggers when the erasure deletes the customer's core_tool_calls rows, never deleted from directly.
CREATE TABLE IF NOT EXISTS core_tool_call_subject_days (
    tool        text   NOT NULL,
    tipo        text   NOT NULL,
    subject     text   NOT NULL,   -- coalesce(cliente_id, 'thread:' || thread_id)
    day         date   NOT NULL,
    calls       bigint NOT NULL,
    cliente_id  text,
    thread_id   text,
    PRIMARY KEY (tool, tipo, subject, day)
);
CREATE INDEX IF NOT EXISTS core_tool_call_subject_days_cliente_idx
    ON core_tool_call_subject_days (cliente_id) WHERE cliente_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS core_tool_call_subject_days_thread_idx
    ON core_tool_call_subject_days (thread_id) WHERE thread_id IS NOT NULL;

-- Subjects per tool, tipo, active day and previous active day ('-infinity': none before): customers per
-- tipo over any window (see above). No customer in it.
CREATE TABLE IF NOT EXISTS core_tool_call_day_pairs (
    tool      text   NOT NULL,
    day       date   NOT NULL,
    tipo      text   NOT NULL,
    prev_day  date   NOT NULL,
    subjects  bigint NOT NULL,
    PRIMARY KEY (tool, day, tipo, prev_day)
);

-- Per thread, tool and UTC day: the first call's ts, calls, distinct tipos, max agent and cliente_id
-- (writing_conversations: the threads whose first call in the window is newest, read by index, LIMIT rows).
CREATE TABLE IF NOT EXISTS core_tool_call_thread_days (
    thread_id   text        NOT NULL,
    tool        text        NOT NULL,
    day         date        NOT NULL,
    first_ts    timestamptz NOT NULL,
    calls       bigint      NOT NULL,
    tipos       text[]      NOT NULL,   -- distinct non-null args ->> 'tipo', sorted
    agent       text,
    cliente_id  text,
    PRIMARY KEY (thread_id, tool, day)
);
CREATE INDEX IF NOT EXISTS core_tool_call_thread_days_first_idx
    ON core_tool_call_thread_days (tool, first_ts DESC, thread_id);
CREATE INDEX IF NOT EXISTS core_tool_call_thread_days_cliente_idx
    ON core_tool_call_thread_days (cliente_id) WHERE cliente_id IS NOT NULL;

-- Per thread with a human message: its latest one and max(cliente_id) over its thread-days
-- (preferences_applied: the most recent threads by index instead of grouping every thread-day).
CREATE TABLE IF NOT EXISTS core_thread_last (
    thread_id      text        PRIMARY KEY,
    last_human_at  timestamptz NOT NULL,
    cliente_id     text
);
CREATE INDEX IF NOT EXISTS core_thread_last_recent_idx ON core_thread_last (last_human_at DESC, thread_id);
CREATE INDEX IF NOT EXISTS core_thread_last_cliente_idx ON core_thread_last (cliente_id) WHERE cliente_id IS NOT NULL;

-- Threads per day with a human message and previous such day of the thread ('-infinity': none):
-- conversations per day, and distinct conversations over a window. No customer in it.
CREATE TABLE IF NOT EXISTS core_thread_day_pairs (
    day       date   NOT NULL,
    prev_day  date   NOT NULL,
    threads   bigint NOT NULL,
    PRIMARY KEY (day, prev_day)
);

-- One signed change of core_tool_calls (+1 a row inserted, -1 a row deleted); thread_id is the row's own.
DO $$
BEGIN
    IF to_regtype('core_tool_call_delta') IS NULL THEN
        CREATE TYPE core_tool_call_delta AS (
            tool text, day date, tipo text, clock text, subject text, cliente_id text, thread_id text, n integer);
    END IF;
END $$;

CREATE OR REPLACE FUNCTION core_preference_rollups_lock() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('core_preference_rollups'), 0);
    RETURN NULL;
END $$;

-- The day pairs of some (tool, tipo, subject) keys as they are now in core_tool_call_subject_days.
CREATE OR REPLACE FUNCTION core_tool_call_pairs_of(tools text[], tipos text[], subjects text[])
RETURNS TABLE (tool text, tipo text, day date, prev_day date) LANGUAGE sql STABLE AS $$
    SELECT b.tool, b.tipo, b.day,
           lag(b.day, 1, '-infinity'::date) OVER (PARTITION BY b.tool, b.tipo, b.subject ORDER BY b.day)
    FROM (SELECT DISTINCT * FROM unnest(tools, tipos, subjects) AS k(tool, tipo, subject)) k
    JOIN core_tool_call_subject_days b ON b.tool = k.tool AND b.tipo = k.tipo AND b.subject = k.subject
$$;

CREATE OR REPLACE FUNCTION core_tool_call_rollups_apply(delta core_tool_call_delta[]) RETURNS void
LANGUAGE plpgsql AS $$
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

-- core_tool_calls rows as signed changes.
CREATE OR REPLACE FUNCTION core_tool_calls_rollup() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE FUNCTION core_tool_calls_rollup_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE core_tool_call_days, core_tool_call_subject_days, core_tool_call_day_pairs, core_tool_call_thread_days;
    RETURN NULL;
END $$;

-- Thread-days removed (old) and present after the change (new), as (thread, day) keys.
CREATE OR REPLACE FUNCTION core_thread_days_apply(old_threads text[], old_days date[], new_threads text[],
                                                  new_days date[]) RETURNS void
LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE FUNCTION core_thread_days_rollup() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE FUNCTION core_thread_days_rollup_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE core_thread_last, core_thread_day_pairs;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS core_preference_rollups_lock ON core_tool_calls;
DROP TRIGGER IF EXISTS core_tool_calls_rollup_ins ON core_tool_calls;
DROP TRIGGER IF EXISTS core_tool_calls_rollup_del ON core_tool_calls;
DROP TRIGGER IF EXISTS core_tool_calls_rollup_upd ON core_tool_calls;
DROP TRIGGER IF EXISTS core_tool_calls_rollup_trunc ON core_tool_calls;
CREATE TRIGGER core_preference_rollups_lock BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON core_tool_calls
    FOR EACH STATEMENT EXECUTE FUNCTION core_preference_rollups_lock();
CREATE TRIGGER core_tool_calls_rollup_ins AFTER INSERT ON core_tool_calls REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_tool_calls_rollup();
CREATE TRIGGER core_tool_calls_rollup_del AFTER DELETE ON core_tool_calls REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_tool_calls_rollup();
CREATE TRIGGER core_tool_calls_rollup_upd AFTER UPDATE ON core_tool_calls
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_tool_calls_rollup();
CREATE TRIGGER core_tool_calls_rollup_trunc AFTER TRUNCATE ON core_tool_calls
    FOR EACH STATEMENT EXECUTE FUNCTION core_tool_calls_rollup_truncate();

DROP TRIGGER IF EXISTS core_preference_rollups_lock ON core_thread_days;
DROP TRIGGER IF EXISTS core_thread_days_rollup_ins ON core_thread_days;
DROP TRIGGER IF EXISTS core_thread_days_rollup_del ON core_thread_days;
DROP TRIGGER IF EXISTS core_thread_days_rollup_upd ON core_thread_days;
DROP TRIGGER IF EXISTS core_thread_days_rollup_trunc ON core_thread_days;
CREATE TRIGGER core_preference_rollups_lock BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON core_thread_days
    FOR EACH STATEMENT EXECUTE FUNCTION core_preference_rollups_lock();
CREATE TRIGGER core_thread_days_rollup_ins AFTER INSERT ON core_thread_days REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_thread_days_rollup();
CREATE TRIGGER core_thread_days_rollup_del AFTER DELETE ON core_thread_days REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_thread_days_rollup();
CREATE TRIGGER core_thread_days_rollup_upd AFTER UPDATE ON core_thread_days
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_thread_days_rollup();
CREATE TRIGGER core_thread_days_rollup_trunc AFTER TRUNCATE ON core_thread_days
    FOR EACH STATEMENT EXECUTE FUNCTION core_thread_days_rollup_truncate();

-- Backfill what is already there; SHARE mode keeps writers out until the triggers see everything.
LOCK TABLE core_tool_calls, core_thread_days IN SHARE MODE;
TRUNCATE core_tool_call_days, core_tool_call_subject_days, core_tool_call_day_pairs, core_tool_call_thread_days,
         core_thread_last, core_thread_day_pairs;
INSERT INTO core_tool_call_days (tool, day, tipo, clock, calls)
SELECT tool, (ts AT TIME ZONE 'UTC')::date, coalesce(args ->> 'tipo', '?'), clock, count(*)
FROM core_tool_calls GROUP BY 1, 2, 3, 4;
INSERT INTO core_tool_call_subject_days (tool, tipo, subject, day, calls, cliente_id, thread_id)
SELECT tool, coalesce(args ->> 'tipo', '?'), coalesce(cliente_id, 'thread:' || thread_id), (ts AT TIME ZONE 'UTC')::date,
       count(*), max(cliente_id), max(CASE WHEN cliente_id IS NULL THEN thread_id END)
FROM core_tool_calls GROUP BY 1, 2, 3, 4;
INSERT INTO core_tool_call_day_pairs (tool, day, tipo, prev_day, subjects)
SELECT tool, day, tipo, prev_day, count(*) FROM (
    SELECT tool, tipo, day, lag(day, 1, '-infinity'::date) OVER (PARTITION BY tool, tipo, subject ORDER BY day) AS prev_day
    FROM core_tool_call_subject_days) x
GROUP BY 1, 2, 3, 4;
INSERT INTO core_tool_call_thread_days (thread_id, tool, day, first_ts, calls, tipos, agent, cliente_id)
SELECT thread_id, tool, (ts AT TIME ZONE 'UTC')::date, min(ts), count(*),
       coalesce(array_agg(DISTINCT args ->> 'tipo') FILTER (WHERE args ->> 'tipo' IS NOT NULL), '{}'),
       max(agent), max(cliente_id)
FROM core_tool_calls GROUP BY 1, 2, 3;
INSERT INTO core_thread_last (thread_id, last_human_at, cliente_id)
SELECT thread_id, max(last_human_at), max(cliente_id) FROM core_thread_days GROUP BY 1;
INSERT INTO core_thread_day_pairs (day, prev_day, threads)
SELECT day, prev_day, count(*) FROM (
    SELECT day, lag(day, 1, '-infinity'::date) OVER (PARTITION BY thread_id ORDER BY day) AS prev_day
    FROM core_thread_days) x
GROUP BY 1, 2;
ANALYZE core_tool_call_days, core_tool_call_subject_days, core_tool_call_day_pairs, core_tool_call_thread_days,
        core_thread_last, core_thread_day_pairs;
