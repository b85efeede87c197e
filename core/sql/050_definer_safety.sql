-- Our SECURITY DEFINER trigger functions, made safe (issue 24). They let an agent role granted on langgraph's
-- tables only (agents we did not write) write its memory and checkpoints while our triggers keep our tables.
-- Before this migration they ran as their owner (the superuser when embedded) with `SET search_path FROM
-- CURRENT` (`"$user", public`), and PostgreSQL searches the session's temporary schema first unless pg_temp is
-- named: a TEMP table named like one of our tables, with a trigger of its own, ran its code as the owner.
--
-- What holds from here (PostgreSQL's "Writing SECURITY DEFINER Functions Safely"), checked by
-- tests/test_definer_safety.py with a real login role that has only an agent's grants:
-- - every definer function pins `search_path = pg_catalog, pg_temp` (pg_temp explicitly last) and names every
--   table and function of ours with its schema (the schema this migration runs in, `@s@` below);
-- - they are owned by `agent_memory_triggers`, a NOLOGIN role that is not a superuser, granted only the rows
--   they keep (below); a shadowing table could at most run code with those rights;
-- - no function of ours is executable by PUBLIC (granted back to the trigger role where a trigger calls it);
--   functions the migrating role creates later in this database are not either (default privileges);
-- - an older 046 left `core_root_counts_add(jsonb)`, a definer function any role could call (1,000,000
--   documents added to the Memory totals by a role with no grants), and a trigger on core_prefix_counts that
--   called it: dropped, and the per-root totals counted again.
--
-- The migrating role must be a superuser, or have CREATEROLE (to create the role and grant it to itself), or
-- find `agent_memory_triggers` created and granted to it by a DBA.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'agent_memory_triggers') THEN
        BEGIN
            CREATE ROLE agent_memory_triggers NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;  -- another database of this cluster migrating at the same moment created it
        END;
    END IF;
    IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
       AND NOT pg_has_role(current_user, 'agent_memory_triggers', 'SET') THEN
        EXECUTE format('GRANT agent_memory_triggers TO %I', current_user);
    END IF;
END
$$;

-- The older 046's objects (its text was edited later; databases migrated with it still have them).
DROP TRIGGER IF EXISTS core_root_counts_ins ON core_prefix_counts;
DROP TRIGGER IF EXISTS core_root_counts_del ON core_prefix_counts;
DROP TRIGGER IF EXISTS core_root_counts_upd ON core_prefix_counts;
DROP TRIGGER IF EXISTS core_root_counts_trunc ON core_prefix_counts;
DROP FUNCTION IF EXISTS core_root_counts_prefix();
DROP FUNCTION IF EXISTS core_root_counts_add(jsonb);

DO $migration$
DECLARE
    s  text := quote_ident(current_schema());
    fn text;
BEGIN
    EXECUTE replace($functions$

-- 042: threads written since they were last indexed (the token index).
CREATE OR REPLACE FUNCTION @s@.core_mark_threads_dirty() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM changed) THEN  -- an upsert fires the UPDATE trigger even when it updated no row
        RETURN NULL;
    END IF;
    INSERT INTO @s@.core_token_dirty AS d (thread_id)
    SELECT DISTINCT thread_id FROM changed ORDER BY thread_id
    ON CONFLICT (thread_id) DO UPDATE SET claimed_at = NULL WHERE d.claimed_at IS NOT NULL;
    RETURN NULL;
END
$$;

-- 043: which customers' documents hold each string value.
CREATE OR REPLACE FUNCTION @s@.core_string_leaves(value jsonb) RETURNS SETOF text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT DISTINCT v #>> '{}' FROM jsonb_path_query(value, 'strict $.**') AS v WHERE jsonb_typeof(v) = 'string'
$$;

CREATE OR REPLACE FUNCTION @s@.core_value_holders_of(prefix text, value jsonb, OUT value_hash bigint, OUT cliente_id text)
RETURNS SETOF record LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT hashtextextended(l, 0), split_part(prefix, '.', 2) FROM @s@.core_string_leaves(value) AS l
    WHERE prefix LIKE 'clientes.%'
$$;

CREATE OR REPLACE FUNCTION @s@.core_value_holders_add() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM new_rows WHERE prefix LIKE 'clientes.%') THEN
        RETURN NULL;
    END IF;
    INSERT INTO @s@.core_value_holders AS h (value_hash, cliente_id, documents)
    SELECT v.value_hash, v.cliente_id, count(*)
    FROM new_rows n CROSS JOIN LATERAL @s@.core_value_holders_of(n.prefix, n.value) v
    GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (value_hash, cliente_id) DO UPDATE SET documents = h.documents + EXCLUDED.documents;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION @s@.core_value_holders_drop(hashes bigint[], customers text[]) RETURNS void
LANGUAGE sql AS $$
    DELETE FROM @s@.core_value_holders h USING unnest(hashes, customers) AS z(value_hash, cliente_id)
    WHERE h.value_hash = z.value_hash AND h.cliente_id = z.cliente_id AND h.documents <= 0
$$;

CREATE OR REPLACE FUNCTION @s@.core_value_holders_remove() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    hashes bigint[];
    customers text[];
BEGIN
    IF NOT EXISTS (SELECT FROM old_rows WHERE prefix LIKE 'clientes.%') THEN
        RETURN NULL;
    END IF;
    WITH changed AS (
        UPDATE @s@.core_value_holders h SET documents = h.documents - d.n
        FROM (SELECT v.value_hash, v.cliente_id, count(*) AS n
              FROM old_rows o CROSS JOIN LATERAL @s@.core_value_holders_of(o.prefix, o.value) v GROUP BY 1, 2) d
        WHERE h.value_hash = d.value_hash AND h.cliente_id = d.cliente_id
        RETURNING h.value_hash, h.cliente_id, h.documents)
    SELECT array_agg(value_hash), array_agg(cliente_id) INTO hashes, customers FROM changed WHERE documents <= 0;
    PERFORM @s@.core_value_holders_drop(hashes, customers);
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION @s@.core_value_holders_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    hashes bigint[];
    customers text[];
BEGIN
    -- an INSERT ... ON CONFLICT DO UPDATE (every PostgresStore put) fires this even when it updated no row
    IF NOT EXISTS (SELECT FROM old_rows WHERE prefix LIKE 'clientes.%') THEN
        RETURN NULL;
    END IF;
    WITH changed AS (
        INSERT INTO @s@.core_value_holders AS h (value_hash, cliente_id, documents)
        SELECT v.value_hash, v.cliente_id, sum(x.delta)::integer FROM (
            SELECT prefix, value, 1 AS delta FROM new_rows WHERE prefix LIKE 'clientes.%'
            UNION ALL SELECT prefix, value, -1 FROM old_rows WHERE prefix LIKE 'clientes.%'
        ) x CROSS JOIN LATERAL @s@.core_value_holders_of(x.prefix, x.value) v
        GROUP BY 1, 2 HAVING sum(x.delta) <> 0 ORDER BY 1, 2
        ON CONFLICT (value_hash, cliente_id) DO UPDATE SET documents = h.documents + EXCLUDED.documents
        RETURNING h.value_hash, h.cliente_id, h.documents)
    SELECT array_agg(value_hash), array_agg(cliente_id) INTO hashes, customers FROM changed WHERE documents <= 0;
    PERFORM @s@.core_value_holders_drop(hashes, customers);
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION @s@.core_value_holders_truncate() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    TRUNCATE @s@.core_value_holders;
    RETURN NULL;
END $$;

-- 040: documents per UTC day of expiry and root.
CREATE OR REPLACE FUNCTION @s@.core_expiry_days_add() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO @s@.core_expiry_days AS d (day, root, documents)
    SELECT (expires_at AT TIME ZONE 'UTC')::date, split_part(prefix, '.', 1), count(*)
    FROM new_rows WHERE expires_at IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (day, root) DO UPDATE SET documents = d.documents + EXCLUDED.documents;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION @s@.core_expiry_days_remove() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO @s@.core_expiry_days AS d (day, root, documents)
    SELECT (expires_at AT TIME ZONE 'UTC')::date, split_part(prefix, '.', 1), -count(*)
    FROM old_rows WHERE expires_at IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (day, root) DO UPDATE SET documents = d.documents + EXCLUDED.documents;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION @s@.core_expiry_days_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO @s@.core_expiry_days AS d (day, root, documents)
    SELECT day, root, sum(delta) FROM (
        SELECT (expires_at AT TIME ZONE 'UTC')::date AS day, split_part(prefix, '.', 1) AS root, 1 AS delta
        FROM new_rows WHERE expires_at IS NOT NULL
        UNION ALL
        SELECT (expires_at AT TIME ZONE 'UTC')::date, split_part(prefix, '.', 1), -1
        FROM old_rows WHERE expires_at IS NOT NULL
    ) x GROUP BY day, root HAVING sum(delta) <> 0 ORDER BY day, root
    ON CONFLICT (day, root) DO UPDATE SET documents = d.documents + EXCLUDED.documents;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION @s@.core_expiry_days_truncate() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    TRUNCATE @s@.core_expiry_days;
    RETURN NULL;
END $$;

-- 007 + 046: documents per prefix, and per root with namespaces, in the same statements.
CREATE OR REPLACE FUNCTION @s@.core_prefix_counts_add() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    WITH up AS (
        INSERT INTO @s@.core_prefix_counts AS c (prefix, documents, last_write)
        SELECT prefix, count(*), max(updated_at) FROM new_rows GROUP BY prefix ORDER BY prefix
        ON CONFLICT (prefix) DO UPDATE
            SET documents = c.documents + EXCLUDED.documents,
                last_write = GREATEST(c.last_write, EXCLUDED.last_write)
        RETURNING c.root, (c.xmax = 0) AS created
    ), d AS (
        SELECT split_part(prefix, '.', 1) AS root, count(*) AS documents FROM new_rows GROUP BY 1
    )
    INSERT INTO @s@.core_root_counts AS r (root, shard, documents, namespaces)
    SELECT d.root, pg_backend_pid() % 8, d.documents,
           (SELECT count(*) FROM up WHERE up.root = d.root AND up.created)
    FROM d ORDER BY d.root
    ON CONFLICT (root, shard) DO UPDATE
        SET documents = r.documents + EXCLUDED.documents, namespaces = r.namespaces + EXCLUDED.namespaces;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION @s@.core_prefix_counts_remove() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE @s@.core_prefix_counts c SET documents = c.documents - d.n
    FROM (SELECT prefix, count(*) AS n FROM old_rows GROUP BY prefix) d
    WHERE c.prefix = d.prefix;
    WITH gone AS (
        DELETE FROM @s@.core_prefix_counts c USING (SELECT DISTINCT prefix FROM old_rows) d
        WHERE c.prefix = d.prefix AND c.documents <= 0
        RETURNING c.root
    ), d AS (
        SELECT split_part(prefix, '.', 1) AS root, count(*) AS documents FROM old_rows GROUP BY 1
    )
    INSERT INTO @s@.core_root_counts AS r (root, shard, documents, namespaces)
    SELECT d.root, pg_backend_pid() % 8, -d.documents, -(SELECT count(*) FROM gone WHERE gone.root = d.root)
    FROM d ORDER BY d.root
    ON CONFLICT (root, shard) DO UPDATE
        SET documents = r.documents + EXCLUDED.documents, namespaces = r.namespaces + EXCLUDED.namespaces;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION @s@.core_prefix_counts_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    WITH up AS (
        INSERT INTO @s@.core_prefix_counts AS c (prefix, documents, last_write)
        SELECT prefix, sum(delta), max(updated_at) FROM (
            SELECT prefix, 1 AS delta, updated_at FROM new_rows
            UNION ALL
            SELECT prefix, -1, NULL FROM old_rows
        ) x GROUP BY prefix ORDER BY prefix
        ON CONFLICT (prefix) DO UPDATE
            SET documents = c.documents + EXCLUDED.documents,
                last_write = GREATEST(c.last_write, EXCLUDED.last_write)
            WHERE EXCLUDED.documents <> 0 OR EXCLUDED.last_write > c.last_write
        RETURNING c.root, (c.xmax = 0) AS created
    ), d AS (
        SELECT root, sum(delta) AS documents FROM (
            SELECT split_part(prefix, '.', 1) AS root, 1 AS delta FROM new_rows
            UNION ALL
            SELECT split_part(prefix, '.', 1), -1 FROM old_rows
        ) x GROUP BY root
    )
    INSERT INTO @s@.core_root_counts AS r (root, shard, documents, namespaces)
    SELECT d.root, pg_backend_pid() % 8, d.documents, n.created
    FROM d CROSS JOIN LATERAL (SELECT count(*) AS created FROM up WHERE up.root = d.root AND up.created) n
    WHERE d.documents <> 0 OR n.created <> 0
    ORDER BY d.root
    ON CONFLICT (root, shard) DO UPDATE
        SET documents = r.documents + EXCLUDED.documents, namespaces = r.namespaces + EXCLUDED.namespaces;
    WITH gone AS (
        DELETE FROM @s@.core_prefix_counts c USING (SELECT DISTINCT prefix FROM old_rows) d
        WHERE c.prefix = d.prefix AND c.documents <= 0
        RETURNING c.root
    )
    INSERT INTO @s@.core_root_counts AS r (root, shard, namespaces)
    SELECT root, pg_backend_pid() % 8, -count(*) FROM gone GROUP BY root ORDER BY root
    ON CONFLICT (root, shard) DO UPDATE SET namespaces = r.namespaces + EXCLUDED.namespaces;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION @s@.core_prefix_counts_truncate() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    TRUNCATE @s@.core_prefix_counts;
    UPDATE @s@.core_root_counts SET documents = 0, namespaces = 0;
    RETURN NULL;
END $$;

-- 046: vectors per root.
CREATE OR REPLACE FUNCTION @s@.core_root_counts_vectors() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO @s@.core_root_counts AS r (root, shard, vectors)
        SELECT split_part(prefix, '.', 1), pg_backend_pid() % 8, count(*) FROM new_rows GROUP BY 1 ORDER BY 1
        ON CONFLICT (root, shard) DO UPDATE SET vectors = r.vectors + EXCLUDED.vectors;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO @s@.core_root_counts AS r (root, shard, vectors)
        SELECT split_part(prefix, '.', 1), pg_backend_pid() % 8, -count(*) FROM old_rows GROUP BY 1 ORDER BY 1
        ON CONFLICT (root, shard) DO UPDATE SET vectors = r.vectors + EXCLUDED.vectors;
    ELSE  -- an upsert's UPDATE keeps (prefix, key): only a moved vector changes a root's count
        INSERT INTO @s@.core_root_counts AS r (root, shard, vectors)
        SELECT root, pg_backend_pid() % 8, sum(delta) FROM (
            SELECT split_part(prefix, '.', 1) AS root, 1 AS delta FROM new_rows
            UNION ALL
            SELECT split_part(prefix, '.', 1), -1 FROM old_rows
        ) u GROUP BY root HAVING sum(delta) <> 0 ORDER BY root
        ON CONFLICT (root, shard) DO UPDATE SET vectors = r.vectors + EXCLUDED.vectors;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION @s@.core_root_counts_truncate() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE @s@.core_root_counts SET vectors = 0;
    RETURN NULL;
END $$;

-- What the trigger role may do: keep these tables, call the helpers above. Nothing else.
GRANT USAGE ON SCHEMA @s@ TO agent_memory_triggers;
GRANT SELECT, INSERT, UPDATE ON @s@.core_token_dirty, @s@.core_root_counts TO agent_memory_triggers;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON @s@.core_value_holders, @s@.core_prefix_counts
    TO agent_memory_triggers;
GRANT SELECT, INSERT, UPDATE, TRUNCATE ON @s@.core_expiry_days TO agent_memory_triggers;

$functions$, '@s@', s);

    -- No function of ours is executable by PUBLIC; definer functions belong to the trigger role (which needs
    -- CREATE on the schema only for the moment of ALTER ... OWNER).
    EXECUTE format('GRANT CREATE ON SCHEMA %s TO agent_memory_triggers', s);
    FOR fn IN
        SELECT p.oid::regprocedure::text FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'core\_%'
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', fn);
    END LOOP;
    FOR fn IN
        SELECT p.oid::regprocedure::text FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'core\_%' AND p.prosecdef
    LOOP
        EXECUTE format('ALTER FUNCTION %s OWNER TO agent_memory_triggers', fn);
    END LOOP;
    EXECUTE format('REVOKE CREATE ON SCHEMA %s FROM agent_memory_triggers', s);
    EXECUTE replace('GRANT EXECUTE ON FUNCTION @s@.core_string_leaves(jsonb), @s@.core_value_holders_of(text, jsonb), '
                    '@s@.core_value_holders_drop(bigint[], text[]) TO agent_memory_triggers', '@s@', s);
END
$migration$;

ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

-- The per-root totals again, as 046 counts them (a database that ran the older 046 counted namespaces through
-- the trigger dropped above). SHARE mode keeps writers out until the triggers see everything.
LOCK TABLE store IN SHARE MODE;
LOCK TABLE store_vectors IN SHARE MODE;
DELETE FROM core_root_counts;
INSERT INTO core_root_counts (root, shard, documents, namespaces, vectors)
SELECT root, 0, sum(documents), sum(namespaces), sum(vectors) FROM (
    SELECT root, documents, 1 AS namespaces, 0 AS vectors FROM core_prefix_counts
    UNION ALL
    SELECT split_part(prefix, '.', 1), 0, 0, 1 FROM store_vectors
) x GROUP BY root;
