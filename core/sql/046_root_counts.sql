-- Documents, namespaces and vectors per namespace root, kept exact by statement-level triggers, for the
-- Memory page's totals and per-root table. Summing `core_prefix_counts` (one row per namespace: 3.2M rows
-- at 10M documents) took ~370 ms and counting `store_vectors` grows with it (BENCHMARKS.md, 10M run).
-- Documents and namespaces follow `core_prefix_counts` itself (its own triggers on `store` already aggregate
-- each statement), vectors follow `store_vectors` (a cascade from a store DELETE fires its statement trigger
-- once, with every cascaded row). Expired documents are not kept here: they depend on the clock, and the
-- pages take them from `core_expiry_days` (040) plus a live count of today's slice.
--
-- Each backend adds its deltas to one of 8 shards per root (pg_backend_pid() % 8), so concurrent writers of
-- the same root rarely wait on the same row until commit; readers sum the shards. Rows are upserted in key
-- order, so two statements never deadlock on them.
CREATE TABLE IF NOT EXISTS core_root_counts (
    root        text     NOT NULL,
    shard       smallint NOT NULL,
    documents   bigint   NOT NULL DEFAULT 0,
    namespaces  bigint   NOT NULL DEFAULT 0,
    vectors     bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (root, shard)
);

CREATE OR REPLACE FUNCTION core_root_counts_add(deltas jsonb) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    INSERT INTO core_root_counts AS r (root, shard, documents, namespaces, vectors)
    SELECT d.root, pg_backend_pid() % 8, d.documents, d.namespaces, d.vectors
    FROM jsonb_to_recordset(deltas) AS d(root text, documents bigint, namespaces bigint, vectors bigint)
    WHERE d.documents <> 0 OR d.namespaces <> 0 OR d.vectors <> 0
    ORDER BY d.root
    ON CONFLICT (root, shard) DO UPDATE
        SET documents = r.documents + EXCLUDED.documents, namespaces = r.namespaces + EXCLUDED.namespaces,
            vectors = r.vectors + EXCLUDED.vectors
$$;

-- core_prefix_counts: an INSERT adds namespaces, a DELETE removes them, an UPDATE changes documents only.
CREATE OR REPLACE FUNCTION core_root_counts_prefix() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM core_root_counts_add((SELECT jsonb_agg(x) FROM (
            SELECT root, sum(documents) AS documents, count(*) AS namespaces, 0 AS vectors
            FROM new_rows GROUP BY root) x));
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM core_root_counts_add((SELECT jsonb_agg(x) FROM (
            SELECT root, -sum(documents) AS documents, -count(*) AS namespaces, 0 AS vectors
            FROM old_rows GROUP BY root) x));
    ELSE
        PERFORM core_root_counts_add((SELECT jsonb_agg(x) FROM (
            SELECT root, sum(documents) AS documents, sum(namespaces) AS namespaces, 0 AS vectors FROM (
                SELECT root, documents, 1 AS namespaces FROM new_rows
                UNION ALL
                SELECT root, -documents, -1 FROM old_rows
            ) u GROUP BY root) x));
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION core_root_counts_vectors() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM core_root_counts_add((SELECT jsonb_agg(x) FROM (
            SELECT split_part(prefix, '.', 1) AS root, 0 AS documents, 0 AS namespaces, count(*) AS vectors
            FROM new_rows GROUP BY 1) x));
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM core_root_counts_add((SELECT jsonb_agg(x) FROM (
            SELECT split_part(prefix, '.', 1) AS root, 0 AS documents, 0 AS namespaces, -count(*) AS vectors
            FROM old_rows GROUP BY 1) x));
    ELSE
        PERFORM core_root_counts_add((SELECT jsonb_agg(x) FROM (
            SELECT root, 0 AS documents, 0 AS namespaces, sum(delta) AS vectors FROM (
                SELECT split_part(prefix, '.', 1) AS root, 1 AS delta FROM new_rows
                UNION ALL
                SELECT split_part(prefix, '.', 1), -1 FROM old_rows
            ) u GROUP BY root) x));
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION core_root_counts_truncate() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_TABLE_NAME = 'store_vectors' THEN
        UPDATE core_root_counts SET vectors = 0;
    ELSE
        UPDATE core_root_counts SET documents = 0, namespaces = 0;
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS core_root_counts_ins ON core_prefix_counts;
DROP TRIGGER IF EXISTS core_root_counts_del ON core_prefix_counts;
DROP TRIGGER IF EXISTS core_root_counts_upd ON core_prefix_counts;
DROP TRIGGER IF EXISTS core_root_counts_trunc ON core_prefix_counts;
CREATE TRIGGER core_root_counts_ins AFTER INSERT ON core_prefix_counts REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_root_counts_prefix();
CREATE TRIGGER core_root_counts_del AFTER DELETE ON core_prefix_counts REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_root_counts_prefix();
CREATE TRIGGER core_root_counts_upd AFTER UPDATE ON core_prefix_counts
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_root_counts_prefix();
CREATE TRIGGER core_root_counts_trunc AFTER TRUNCATE ON core_prefix_counts
    FOR EACH STATEMENT EXECUTE FUNCTION core_root_counts_truncate();

DROP TRIGGER IF EXISTS core_root_counts_vec_ins ON store_vectors;
DROP TRIGGER IF EXISTS core_root_counts_vec_del ON store_vectors;
DROP TRIGGER IF EXISTS core_root_counts_vec_upd ON store_vectors;
DROP TRIGGER IF EXISTS core_root_counts_vec_trunc ON store_vectors;
CREATE TRIGGER core_root_counts_vec_ins AFTER INSERT ON store_vectors REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_root_counts_vectors();
CREATE TRIGGER core_root_counts_vec_del AFTER DELETE ON store_vectors REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_root_counts_vectors();
CREATE TRIGGER core_root_counts_vec_upd AFTER UPDATE ON store_vectors
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION core_root_counts_vectors();
CREATE TRIGGER core_root_counts_vec_trunc AFTER TRUNCATE ON store_vectors
    FOR EACH STATEMENT EXECUTE FUNCTION core_root_counts_truncate();

-- Backfill; SHARE mode keeps writers out until the triggers see everything (core_prefix_counts is written
-- only by store's triggers, so locking store holds it still too).
LOCK TABLE store IN SHARE MODE;
LOCK TABLE store_vectors IN SHARE MODE;
DELETE FROM core_root_counts;
INSERT INTO core_root_counts (root, shard, documents, namespaces, vectors)
SELECT root, 0, sum(documents), sum(namespaces), sum(vectors) FROM (
    SELECT root, documents, 1 AS namespaces, 0 AS vectors FROM core_prefix_counts
    UNION ALL
    SELECT split_part(prefix, '.', 1), 0, 0, 1 FROM store_vectors
) x GROUP BY root;
