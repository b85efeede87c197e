-- Documents per UTC day of expiry and namespace root, kept exact by statement-level triggers on
-- `store` (the pattern of 007_prefix_counts.sql), for the Sweeps page's 12-month expiration forecast
-- (core/operations/sweep_reads.py SELECT_FORECAST). The live GROUP BY reads ~80% of `store` through
-- the (expires_at) INCLUDE (prefix) index: 180-380 ms at 1M documents (BENCHMARKS.md), 10x that at
-- 10M. With this table the forecast reads ~1,100 rows plus, live, the documents expiring in the rest
-- of today. Cost: a write that moves `expires_at` to another day (a TTL refresh on read, an upsert)
-- also upserts two rows here; a statement's rows are aggregated first (a sweep deleting 200k documents
-- costs one grouped upsert), rows are upserted in key order (no deadlock between two statements),
-- and a pure refresh within the same day writes nothing. Days that have passed keep their rows
-- (0 once swept); the read ignores them.
CREATE TABLE IF NOT EXISTS core_expiry_days (
    day        date   NOT NULL,   -- (expires_at AT TIME ZONE 'UTC')::date
    root       text   NOT NULL,   -- split_part(prefix, '.', 1)
    documents  bigint NOT NULL,
    PRIMARY KEY (day, root)
);


CREATE OR REPLACE FUNCTION core_expiry_days_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO core_expiry_days AS d (day, root, documents)
    SELECT (expires_at AT TIME ZONE 'UTC')::date, split_part(prefix, '.', 1), count(*)
    FROM new_rows WHERE expires_at IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (day, root) DO UPDATE SET documents = d.documents + EXCLUDED.documents;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION core_expiry_days_remove() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO core_expiry_days AS d (day, root, documents)
    SELECT (expires_at AT TIME ZONE 'UTC')::date, split_part(prefix, '.', 1), -count(*)
    FROM old_rows WHERE expires_at IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (day, root) DO UPDATE SET documents = d.documents + EXCLUDED.documents;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION core_expiry_days_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO core_expiry_days AS d (day, root, documents)
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

CREATE OR REPLACE FUNCTION core_expiry_days_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE core_expiry_days;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS core_expiry_days_ins ON store;
DROP TRIGGER IF EXISTS core_expiry_days_del ON store;
DROP TRIGGER IF EXISTS core_expiry_days_upd ON store;
DROP TRIGGER IF EXISTS core_expiry_days_trunc ON store;
CREATE TRIGGER core_expiry_days_ins AFTER INSERT ON store REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_expiry_days_add();
CREATE TRIGGER core_expiry_days_del AFTER DELETE ON store REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_expiry_days_remove();
CREATE TRIGGER core_expiry_days_upd AFTER UPDATE ON store REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_expiry_days_update();
CREATE TRIGGER core_expiry_days_trunc AFTER TRUNCATE ON store
    FOR EACH STATEMENT EXECUTE FUNCTION core_expiry_days_truncate();

-- Backfill what is already there; SHARE mode keeps writers out until the triggers see everything.
LOCK TABLE store IN SHARE MODE;
DELETE FROM core_expiry_days;
INSERT INTO core_expiry_days (day, root, documents)
SELECT (expires_at AT TIME ZONE 'UTC')::date, split_part(prefix, '.', 1), count(*)
FROM store WHERE expires_at IS NOT NULL GROUP BY 1, 2;
