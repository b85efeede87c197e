-- One statement trigger per event on `store` instead of three (issue 24: what our triggers cost a stock store
-- put). 007/046 (documents per prefix and root), 040 (documents per expiry day) and 043 (who holds each value)
-- each had their own INSERT, UPDATE, DELETE and TRUNCATE triggers, and every PostgresStore put (an INSERT ...
-- ON CONFLICT DO UPDATE) fires both the INSERT and the UPDATE ones: six definer calls per put, each with its
-- own trigger setup and search_path switch. Here each event runs one definer function doing the same statements
-- in the order the three triggers fired (expiry days, prefix and root counts, value holders: alphabetical by
-- trigger name), and the UPDATE one returns at once when the upsert updated nothing. Same results; the old
-- triggers and their functions are dropped. Safety as in 050: pinned search_path, schema-qualified names, owned
-- by agent_memory_triggers, not executable by PUBLIC.

DROP TRIGGER IF EXISTS core_expiry_days_ins ON store;
DROP TRIGGER IF EXISTS core_expiry_days_del ON store;
DROP TRIGGER IF EXISTS core_expiry_days_upd ON store;
DROP TRIGGER IF EXISTS core_expiry_days_trunc ON store;
DROP TRIGGER IF EXISTS core_prefix_counts_ins ON store;
DROP TRIGGER IF EXISTS core_prefix_counts_del ON store;
DROP TRIGGER IF EXISTS core_prefix_counts_upd ON store;
DROP TRIGGER IF EXISTS core_prefix_counts_trunc ON store;
DROP TRIGGER IF EXISTS core_value_holders_ins ON store;
DROP TRIGGER IF EXISTS core_value_holders_del ON store;
DROP TRIGGER IF EXISTS core_value_holders_upd ON store;
DROP TRIGGER IF EXISTS core_value_holders_trunc ON store;
DROP FUNCTION IF EXISTS core_expiry_days_add(), core_expiry_days_remove(), core_expiry_days_update(),
    core_expiry_days_truncate(), core_prefix_counts_add(), core_prefix_counts_remove(), core_prefix_counts_update(),
    core_prefix_counts_truncate(), core_value_holders_add(), core_value_holders_remove(), core_value_holders_update(),
    core_value_holders_truncate();

DO $migration$
DECLARE
    s  text := quote_ident(current_schema());
    fn text;
BEGIN
    EXECUTE replace($functions$

CREATE OR REPLACE FUNCTION @s@.core_store_inserted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO @s@.core_expiry_days AS d (day, root, documents)
    SELECT (expires_at AT TIME ZONE 'UTC')::date, split_part(prefix, '.', 1), count(*)
    FROM new_rows WHERE expires_at IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (day, root) DO UPDATE SET documents = d.documents + EXCLUDED.documents;

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

    INSERT INTO @s@.core_value_holders AS h (value_hash, cliente_id, documents)
    SELECT v.value_hash, v.cliente_id, count(*)
    FROM new_rows n CROSS JOIN LATERAL @s@.core_value_holders_of(n.prefix, n.value) v
    WHERE n.prefix LIKE 'clientes.%'
    GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (value_hash, cliente_id) DO UPDATE SET documents = h.documents + EXCLUDED.documents;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION @s@.core_store_deleted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    hashes bigint[];
    customers text[];
BEGIN
    INSERT INTO @s@.core_expiry_days AS d (day, root, documents)
    SELECT (expires_at AT TIME ZONE 'UTC')::date, split_part(prefix, '.', 1), -count(*)
    FROM old_rows WHERE expires_at IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (day, root) DO UPDATE SET documents = d.documents + EXCLUDED.documents;

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

    IF EXISTS (SELECT FROM old_rows WHERE prefix LIKE 'clientes.%') THEN
        WITH changed AS (
            UPDATE @s@.core_value_holders h SET documents = h.documents - d.n
            FROM (SELECT v.value_hash, v.cliente_id, count(*) AS n
                  FROM old_rows o CROSS JOIN LATERAL @s@.core_value_holders_of(o.prefix, o.value) v GROUP BY 1, 2) d
            WHERE h.value_hash = d.value_hash AND h.cliente_id = d.cliente_id
            RETURNING h.value_hash, h.cliente_id, h.documents)
        SELECT array_agg(value_hash), array_agg(cliente_id) INTO hashes, customers FROM changed WHERE documents <= 0;
        PERFORM @s@.core_value_holders_drop(hashes, customers);
    END IF;
    RETURN NULL;
END $$;

-- An UPDATE (an overwrite, a TTL refresh on read): only what moved between prefixes, days or values changes a row.
CREATE OR REPLACE FUNCTION @s@.core_store_updated() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    hashes bigint[];
    customers text[];
BEGIN
    -- an INSERT ... ON CONFLICT DO UPDATE (every PostgresStore put) fires this even when it updated no row
    IF NOT EXISTS (SELECT FROM old_rows) THEN
        RETURN NULL;
    END IF;

    INSERT INTO @s@.core_expiry_days AS d (day, root, documents)
    SELECT day, root, sum(delta) FROM (
        SELECT (expires_at AT TIME ZONE 'UTC')::date AS day, split_part(prefix, '.', 1) AS root, 1 AS delta
        FROM new_rows WHERE expires_at IS NOT NULL
        UNION ALL
        SELECT (expires_at AT TIME ZONE 'UTC')::date, split_part(prefix, '.', 1), -1
        FROM old_rows WHERE expires_at IS NOT NULL
    ) x GROUP BY day, root HAVING sum(delta) <> 0 ORDER BY day, root
    ON CONFLICT (day, root) DO UPDATE SET documents = d.documents + EXCLUDED.documents;

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

    IF EXISTS (SELECT FROM old_rows WHERE prefix LIKE 'clientes.%') THEN
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
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION @s@.core_store_truncated() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    TRUNCATE @s@.core_expiry_days;
    TRUNCATE @s@.core_prefix_counts;
    UPDATE @s@.core_root_counts SET documents = 0, namespaces = 0;
    TRUNCATE @s@.core_value_holders;
    RETURN NULL;
END $$;

$functions$, '@s@', s);

    EXECUTE format('GRANT CREATE ON SCHEMA %s TO agent_memory_triggers', s);
    FOREACH fn IN ARRAY ARRAY['core_store_inserted()', 'core_store_deleted()', 'core_store_updated()',
                              'core_store_truncated()'] LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s.%s FROM PUBLIC', s, fn);
        EXECUTE format('ALTER FUNCTION %s.%s OWNER TO agent_memory_triggers', s, fn);
    END LOOP;
    EXECUTE format('REVOKE CREATE ON SCHEMA %s FROM agent_memory_triggers', s);
END
$migration$;

CREATE TRIGGER core_store_ins AFTER INSERT ON store REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_store_inserted();
CREATE TRIGGER core_store_del AFTER DELETE ON store REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_store_deleted();
CREATE TRIGGER core_store_upd AFTER UPDATE ON store REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_store_updated();
CREATE TRIGGER core_store_trunc AFTER TRUNCATE ON store
    FOR EACH STATEMENT EXECUTE FUNCTION core_store_truncated();
