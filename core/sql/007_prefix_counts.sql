-- Documents per namespace prefix, kept exact by statement-level triggers on `store`, because the
-- live GROUP BY over 1M rows takes ~0.5-0.8 s (BENCHMARKS.md) and the Memory page needs it on every
-- visit. Transition tables aggregate a whole statement at once, so a sweep or an erasure deleting
-- thousands of rows costs one grouped UPDATE, not one per row. Expiry is not kept here (it depends
-- on the clock): pages count expired rows live through the store's expires_at index.
CREATE TABLE IF NOT EXISTS core_prefix_counts (
    prefix      text PRIMARY KEY,
    root        text GENERATED ALWAYS AS (split_part(prefix, '.', 1)) STORED,
    documents   bigint NOT NULL,
    last_write  timestamptz
);
CREATE INDEX IF NOT EXISTS core_prefix_counts_documents_idx ON core_prefix_counts (documents DESC, prefix);
CREATE INDEX IF NOT EXISTS core_prefix_counts_root_documents_idx ON core_prefix_counts (root, documents DESC, prefix);

CREATE OR REPLACE FUNCTION core_prefix_counts_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO core_prefix_counts AS c (prefix, documents, last_write)
    SELECT prefix, count(*), max(updated_at) FROM new_rows GROUP BY prefix ORDER BY prefix
    ON CONFLICT (prefix) DO UPDATE
        SET documents = c.documents + EXCLUDED.documents,
            last_write = GREATEST(c.last_write, EXCLUDED.last_write);
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION core_prefix_counts_remove() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE core_prefix_counts c SET documents = c.documents - d.n
    FROM (SELECT prefix, count(*) AS n FROM old_rows GROUP BY prefix) d
    WHERE c.prefix = d.prefix;
    DELETE FROM core_prefix_counts c USING (SELECT DISTINCT prefix FROM old_rows) d
    WHERE c.prefix = d.prefix AND c.documents <= 0;
    RETURN NULL;
END $$;

-- An upsert that overwrites (`pref-{tipo}` again) or a TTL refresh on read is an UPDATE: the
-- count changes only if a prefix itself changed (langgraph never does that), but last_write may
-- move. The WHERE skips the write entirely for a pure TTL refresh.
CREATE OR REPLACE FUNCTION core_prefix_counts_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO core_prefix_counts AS c (prefix, documents, last_write)
    SELECT prefix, sum(delta), max(updated_at) FROM (
        SELECT prefix, 1 AS delta, updated_at FROM new_rows
        UNION ALL
        SELECT prefix, -1, NULL FROM old_rows
    ) x GROUP BY prefix ORDER BY prefix
    ON CONFLICT (prefix) DO UPDATE
        SET documents = c.documents + EXCLUDED.documents,
            last_write = GREATEST(c.last_write, EXCLUDED.last_write)
        WHERE EXCLUDED.documents <> 0 OR EXCLUDED.last_write > c.last_write;
    DELETE FROM core_prefix_counts c USING (SELECT DISTINCT prefix FROM old_rows) d
    WHERE c.prefix = d.prefix AND c.documents <= 0;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION core_prefix_counts_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE core_prefix_counts;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS core_prefix_counts_ins ON store;
DROP TRIGGER IF EXISTS core_prefix_counts_del ON store;
DROP TRIGGER IF EXISTS core_prefix_counts_upd ON store;
DROP TRIGGER IF EXISTS core_prefix_counts_trunc ON store;
CREATE TRIGGER core_prefix_counts_ins AFTER INSERT ON store REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_prefix_counts_add();
CREATE TRIGGER core_prefix_counts_del AFTER DELETE ON store REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_prefix_counts_remove();
CREATE TRIGGER core_prefix_counts_upd AFTER UPDATE ON store REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_prefix_counts_update();
CREATE TRIGGER core_prefix_counts_trunc AFTER TRUNCATE ON store
    FOR EACH STATEMENT EXECUTE FUNCTION core_prefix_counts_truncate();

-- Backfill what is already there; SHARE mode keeps writers out until the triggers see everything.
LOCK TABLE store IN SHARE MODE;
DELETE FROM core_prefix_counts;
INSERT INTO core_prefix_counts (prefix, documents, last_write)
SELECT prefix, count(*), max(updated_at) FROM store GROUP BY prefix;
