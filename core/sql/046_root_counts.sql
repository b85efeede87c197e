-- Documents, namespaces and vectors per namespace root, kept exact by statement-level triggers, for the
-- Memory page's totals and per-root table. Summing `core_prefix_counts` (one row per namespace: 3.2M rows
-- at 10M documents) took ~370 ms and counting `store_vectors` grows with it (BENCHMARKS.md, 10M run).
-- Documents and namespaces are added by the same statements of 007's trigger functions that keep
-- `core_prefix_counts` (replaced below), vectors by triggers on `store_vectors`. Expired documents are not
-- kept here: they depend on the clock, and the pages take them from `core_expiry_days` (040) plus a live
-- count of today's slice.
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

-- Documents and namespaces are counted by 007's own trigger functions on `store`, replaced here: the statement
-- that upserts a prefix's count also adds its root's (a trigger on core_prefix_counts instead cost a stock store
-- put 19 %, bench/bench_write_triggers.py). A new namespace is a prefix row the upsert inserted (`xmax = 0` in
-- its RETURNING), a gone one a row the DELETE returned.
CREATE OR REPLACE FUNCTION core_prefix_counts_add() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    WITH up AS (
        INSERT INTO core_prefix_counts AS c (prefix, documents, last_write)
        SELECT prefix, count(*), max(updated_at) FROM new_rows GROUP BY prefix ORDER BY prefix
        ON CONFLICT (prefix) DO UPDATE
            SET documents = c.documents + EXCLUDED.documents,
                last_write = GREATEST(c.last_write, EXCLUDED.last_write)
        RETURNING c.root, (c.xmax = 0) AS created
    ), d AS (
        SELECT split_part(prefix, '.', 1) AS root, count(*) AS documents FROM new_rows GROUP BY 1
    )
    INSERT INTO core_root_counts AS r (root, shard, documents, namespaces)
    SELECT d.root, pg_backend_pid() % 8, d.documents,
           (SELECT count(*) FROM up WHERE up.root = d.root AND up.created)
    FROM d ORDER BY d.root
    ON CONFLICT (root, shard) DO UPDATE
        SET documents = r.documents + EXCLUDED.documents, namespaces = r.namespaces + EXCLUDED.namespaces;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION core_prefix_counts_remove() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE core_prefix_counts c SET documents = c.documents - d.n
    FROM (SELECT prefix, count(*) AS n FROM old_rows GROUP BY prefix) d
    WHERE c.prefix = d.prefix;
    WITH gone AS (
        DELETE FROM core_prefix_counts c USING (SELECT DISTINCT prefix FROM old_rows) d
        WHERE c.prefix = d.prefix AND c.documents <= 0
        RETURNING c.root
    ), d AS (
        SELECT split_part(prefix, '.', 1) AS root, count(*) AS documents FROM old_rows GROUP BY 1
    )
    INSERT INTO core_root_counts AS r (root, shard, documents, namespaces)
    SELECT d.root, pg_backend_pid() % 8, -d.documents, -(SELECT count(*) FROM gone WHERE gone.root = d.root)
    FROM d ORDER BY d.root
    ON CONFLICT (root, shard) DO UPDATE
        SET documents = r.documents + EXCLUDED.documents, namespaces = r.namespaces + EXCLUDED.namespaces;
    RETURN NULL;
END $$;

-- An UPDATE (an overwrite, a TTL refresh) moves documents between roots only if a prefix changed (langgraph never
-- does that); most statements change no count, and then write nothing here.
CREATE OR REPLACE FUNCTION core_prefix_counts_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    WITH up AS (
        INSERT INTO core_prefix_counts AS c (prefix, documents, last_write)
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
    INSERT INTO core_root_counts AS r (root, shard, documents, namespaces)
    SELECT d.root, pg_backend_pid() % 8, d.documents, n.created
    FROM d CROSS JOIN LATERAL (SELECT count(*) AS created FROM up WHERE up.root = d.root AND up.created) n
    WHERE d.documents <> 0 OR n.created <> 0
    ORDER BY d.root
    ON CONFLICT (root, shard) DO UPDATE
        SET documents = r.documents + EXCLUDED.documents, namespaces = r.namespaces + EXCLUDED.namespaces;
    WITH gone AS (
        DELETE FROM core_prefix_counts c USING (SELECT DISTINCT prefix FROM old_rows) d
        WHERE c.prefix = d.prefix AND c.documents <= 0
        RETURNING c.root
    )
    INSERT INTO core_root_counts AS r (root, shard, namespaces)
    SELECT root, pg_backend_pid() % 8, -count(*) FROM gone GROUP BY root ORDER BY root
    ON CONFLICT (root, shard) DO UPDATE SET namespaces = r.namespaces + EXCLUDED.namespaces;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION core_prefix_counts_truncate() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    TRUNCATE core_prefix_counts;
    UPDATE core_root_counts SET documents = 0, namespaces = 0;
    RETURN NULL;
END $$;

-- Vectors: statement triggers on store_vectors (a cascade from a store DELETE fires its statement trigger once,
-- with every cascaded row).
CREATE OR REPLACE FUNCTION core_root_counts_vectors() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO core_root_counts AS r (root, shard, vectors)
        SELECT split_part(prefix, '.', 1), pg_backend_pid() % 8, count(*) FROM new_rows GROUP BY 1 ORDER BY 1
        ON CONFLICT (root, shard) DO UPDATE SET vectors = r.vectors + EXCLUDED.vectors;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO core_root_counts AS r (root, shard, vectors)
        SELECT split_part(prefix, '.', 1), pg_backend_pid() % 8, -count(*) FROM old_rows GROUP BY 1 ORDER BY 1
        ON CONFLICT (root, shard) DO UPDATE SET vectors = r.vectors + EXCLUDED.vectors;
    ELSE  -- an upsert's UPDATE keeps (prefix, key): only a moved vector changes a root's count
        INSERT INTO core_root_counts AS r (root, shard, vectors)
        SELECT root, pg_backend_pid() % 8, sum(delta) FROM (
            SELECT split_part(prefix, '.', 1) AS root, 1 AS delta FROM new_rows
            UNION ALL
            SELECT split_part(prefix, '.', 1), -1 FROM old_rows
        ) u GROUP BY root HAVING sum(delta) <> 0 ORDER BY root
        ON CONFLICT (root, shard) DO UPDATE SET vectors = r.vectors + EXCLUDED.vectors;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION core_root_counts_truncate() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE core_root_counts SET vectors = 0;
    RETURN NULL;
END $$;

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
