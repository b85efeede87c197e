-- Which customers' documents hold each string value, kept exact by statement-level triggers on `store`
-- (like core_prefix_counts), so that the residue scan's commonness of a term (core/privacy/residue.py:
-- "held by more customers than this one") is an index lookup per term instead of a pass over every
-- customer document (16.2 s for one customer's 2,506 values at 10M documents, BENCHMARKS.md).
--
-- One row per (hash of a string leaf, customer) with the number of that customer's documents holding it.
-- The hash is 64-bit (hashtextextended): a collision would make a value look common and keep it from
-- proposing residue threads, at 10M distinct values its chance is ~1e-12 per term. It is derived from the
-- customer's documents (cliente_id = the namespace's second label): an erasure counts it in its evidence,
-- and the store's DELETE trigger empties it (like core_prefix_counts, never deleted from directly).
CREATE TABLE IF NOT EXISTS core_value_holders (
    value_hash  bigint  NOT NULL,
    cliente_id  text    NOT NULL,
    documents   integer NOT NULL,
    PRIMARY KEY (value_hash, cliente_id)
);
-- a customer's rows: the erasure's evidence count
CREATE INDEX IF NOT EXISTS core_value_holders_cliente_idx ON core_value_holders (cliente_id);

-- The distinct string values of a document, at any depth (what residue.SELECT_DOCUMENT_VALUES reads).
CREATE OR REPLACE FUNCTION core_string_leaves(value jsonb) RETURNS SETOF text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT DISTINCT v #>> '{}' FROM jsonb_path_query(value, 'strict $.**') AS v WHERE jsonb_typeof(v) = 'string'
$$;

-- The (value hash, customer) pairs of one store row: none unless it is a customer's document.
CREATE OR REPLACE FUNCTION core_value_holders_of(prefix text, value jsonb, OUT value_hash bigint, OUT cliente_id text)
RETURNS SETOF record LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT hashtextextended(l, 0), split_part(prefix, '.', 2) FROM core_string_leaves(value) AS l
    WHERE prefix LIKE 'clientes.%'
$$;

-- SECURITY DEFINER: the agents' own role needs no privilege on this table (see 042).
CREATE OR REPLACE FUNCTION core_value_holders_add() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM new_rows WHERE prefix LIKE 'clientes.%') THEN
        RETURN NULL;
    END IF;
    INSERT INTO core_value_holders AS h (value_hash, cliente_id, documents)
    SELECT v.value_hash, v.cliente_id, count(*) FROM new_rows n CROSS JOIN LATERAL core_value_holders_of(n.prefix, n.value) v
    GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (value_hash, cliente_id) DO UPDATE SET documents = h.documents + EXCLUDED.documents;
    RETURN NULL;
END $$;

-- Rows that reached 0, deleted in a statement of their own (a DELETE in the statement that updated them
-- would not see the update).
CREATE OR REPLACE FUNCTION core_value_holders_drop(hashes bigint[], customers text[]) RETURNS void
LANGUAGE sql AS $$
    DELETE FROM core_value_holders h USING unnest(hashes, customers) AS z(value_hash, cliente_id)
    WHERE h.value_hash = z.value_hash AND h.cliente_id = z.cliente_id AND h.documents <= 0
$$;

CREATE OR REPLACE FUNCTION core_value_holders_remove() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    hashes bigint[];
    customers text[];
BEGIN
    IF NOT EXISTS (SELECT FROM old_rows WHERE prefix LIKE 'clientes.%') THEN
        RETURN NULL;
    END IF;
    WITH changed AS (
        UPDATE core_value_holders h SET documents = h.documents - d.n
        FROM (SELECT v.value_hash, v.cliente_id, count(*) AS n
              FROM old_rows o CROSS JOIN LATERAL core_value_holders_of(o.prefix, o.value) v GROUP BY 1, 2) d
        WHERE h.value_hash = d.value_hash AND h.cliente_id = d.cliente_id
        RETURNING h.value_hash, h.cliente_id, h.documents)
    SELECT array_agg(value_hash), array_agg(cliente_id) INTO hashes, customers FROM changed WHERE documents <= 0;
    PERFORM core_value_holders_drop(hashes, customers);
    RETURN NULL;
END $$;

-- An upsert that rewrites a document or a TTL refresh on read is an UPDATE: only values that appear or
-- disappear change a row (a pure TTL refresh changes nothing).
CREATE OR REPLACE FUNCTION core_value_holders_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    hashes bigint[];
    customers text[];
BEGIN
    -- an INSERT ... ON CONFLICT DO UPDATE (every PostgresStore put) fires this even when it updated no row
    IF NOT EXISTS (SELECT FROM old_rows WHERE prefix LIKE 'clientes.%') THEN
        RETURN NULL;
    END IF;
    WITH changed AS (
        INSERT INTO core_value_holders AS h (value_hash, cliente_id, documents)
        SELECT v.value_hash, v.cliente_id, sum(x.delta)::integer FROM (
            SELECT prefix, value, 1 AS delta FROM new_rows WHERE prefix LIKE 'clientes.%'
            UNION ALL SELECT prefix, value, -1 FROM old_rows WHERE prefix LIKE 'clientes.%'
        ) x CROSS JOIN LATERAL core_value_holders_of(x.prefix, x.value) v
        GROUP BY 1, 2 HAVING sum(x.delta) <> 0 ORDER BY 1, 2
        ON CONFLICT (value_hash, cliente_id) DO UPDATE SET documents = h.documents + EXCLUDED.documents
        RETURNING h.value_hash, h.cliente_id, h.documents)
    SELECT array_agg(value_hash), array_agg(cliente_id) INTO hashes, customers FROM changed WHERE documents <= 0;
    PERFORM core_value_holders_drop(hashes, customers);
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION core_value_holders_truncate() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    TRUNCATE core_value_holders;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS core_value_holders_ins ON store;
DROP TRIGGER IF EXISTS core_value_holders_del ON store;
DROP TRIGGER IF EXISTS core_value_holders_upd ON store;
DROP TRIGGER IF EXISTS core_value_holders_trunc ON store;
CREATE TRIGGER core_value_holders_ins AFTER INSERT ON store REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_value_holders_add();
CREATE TRIGGER core_value_holders_del AFTER DELETE ON store REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_value_holders_remove();
CREATE TRIGGER core_value_holders_upd AFTER UPDATE ON store REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_value_holders_update();
CREATE TRIGGER core_value_holders_trunc AFTER TRUNCATE ON store
    FOR EACH STATEMENT EXECUTE FUNCTION core_value_holders_truncate();

-- The other triggers on `store` (documents per prefix, per expiry day) run as their definer too: an agent
-- role granted on `store` only (agents we did not write) must be able to write its memory.
ALTER FUNCTION core_prefix_counts_add() SECURITY DEFINER SET search_path FROM CURRENT;
ALTER FUNCTION core_prefix_counts_remove() SECURITY DEFINER SET search_path FROM CURRENT;
ALTER FUNCTION core_prefix_counts_update() SECURITY DEFINER SET search_path FROM CURRENT;
ALTER FUNCTION core_prefix_counts_truncate() SECURITY DEFINER SET search_path FROM CURRENT;
ALTER FUNCTION core_expiry_days_add() SECURITY DEFINER SET search_path FROM CURRENT;
ALTER FUNCTION core_expiry_days_remove() SECURITY DEFINER SET search_path FROM CURRENT;
ALTER FUNCTION core_expiry_days_update() SECURITY DEFINER SET search_path FROM CURRENT;
ALTER FUNCTION core_expiry_days_truncate() SECURITY DEFINER SET search_path FROM CURRENT;

-- Backfill what is already there; SHARE mode keeps writers out until the triggers see everything.
LOCK TABLE store IN SHARE MODE;
DELETE FROM core_value_holders;
INSERT INTO core_value_holders (value_hash, cliente_id, documents)
SELECT v.value_hash, v.cliente_id, count(*)
FROM store s CROSS JOIN LATERAL core_value_holders_of(s.prefix, s.value) v
WHERE s.prefix LIKE 'clientes.%'
GROUP BY 1, 2;
