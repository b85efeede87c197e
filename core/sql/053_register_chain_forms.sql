-- Repair of databases migrated with the first text of 036_register_chain.sql (issue 24). 036 was edited in
-- place so that a sealed row's canonical content leaves out null values and resumed_by: a nullable column
-- added later (015's) and a resumed request's forward link would otherwise change the content of rows sealed
-- before. A database that had applied the first text kept sealing with it (the row as jsonb with its nulls,
-- resumed_by included), and once 015 had added its columns its verifier reported every sealed erasure row
-- as edited.
--  1. core_register_content as 036 defines it today: rows sealed from now on get today's content.
--  2. A link sealed by the first text keeps its hash (rewriting it would change head hashes already handed
--     out in access exports); it records instead the keys its row had when it was sealed (sealed_keys),
--     found here by recomputing the first text's content with and without 015's columns (a row sealed
--     before 015 did not have them) and keeping the key set whose hash is the sealed one. A link whose hash
--     matches neither today's content nor the first text's keeps sealed_keys NULL: the verifier reports
--     that row as edited, which it is.
--  3. core_register_link_content(table, id, sealed_keys): the text a link's content_sha256 is the hash of,
--     in either form; core/privacy/chain.py verifies with it.
-- On a database migrated with today's 036 every link is in today's form: sealed_keys stays NULL.
ALTER TABLE core_register_chain ADD COLUMN IF NOT EXISTS sealed_keys text[];  -- NULL: today's canonical content

CREATE OR REPLACE FUNCTION core_register_content(tbl text, rid bigint) RETURNS text
LANGUAGE plpgsql STABLE
SET TimeZone = 'UTC' SET extra_float_digits = 1 SET DateStyle = 'ISO, YMD' AS $$
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
    ELSE
        RAISE EXCEPTION 'not a sealed register table: %', tbl;
    END IF;
    RETURN doc::text;
END $$;

CREATE OR REPLACE FUNCTION core_register_link_content(tbl text, rid bigint, sealed_keys text[]) RETURNS text
LANGUAGE plpgsql STABLE
SET TimeZone = 'UTC' SET extra_float_digits = 1 SET DateStyle = 'ISO, YMD' AS $$
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
END $$;

DO $$
DECLARE
    link    record;
    keys    text[];  -- the row's keys now, but the columns a re-check updates
    without text[];  -- the same without 015's columns
BEGIN
    FOR link IN SELECT c.table_name, c.row_id, c.content_sha256 FROM core_register_chain c
                WHERE c.sealed_keys IS NULL
                  AND c.table_name IN ('core_access_register', 'core_erasure_register', 'core_erasure_rechecks')
                  AND encode(sha256(convert_to(core_register_content(c.table_name, c.row_id), 'UTF8')), 'hex')
                      IS DISTINCT FROM c.content_sha256 LOOP
        EXECUTE format('SELECT array_agg(k ORDER BY k) FROM %I r CROSS JOIN jsonb_object_keys(to_jsonb(r)) k '
                       'WHERE r.id = $1 AND k NOT IN (''last_recheck_at'', ''last_recheck_clean'')', link.table_name)
            INTO keys USING link.row_id;
        CONTINUE WHEN keys IS NULL;  -- the row is gone: the verifier reports it
        without := ARRAY(SELECT k FROM unnest(keys) k
                         WHERE k <> ALL ('{sources,residue,residue_terms,exclusions,resumed_by}'::text[]) ORDER BY k);
        IF encode(sha256(convert_to(core_register_link_content(link.table_name, link.row_id, without), 'UTF8')),
                  'hex') = link.content_sha256 THEN
            keys := without;  -- sealed before 015 added its columns
        ELSIF encode(sha256(convert_to(core_register_link_content(link.table_name, link.row_id, keys), 'UTF8')),
                     'hex') IS DISTINCT FROM link.content_sha256 THEN
            CONTINUE;         -- neither form: edited since it was sealed
        END IF;
        UPDATE core_register_chain SET sealed_keys = keys
        WHERE table_name = link.table_name AND row_id = link.row_id;
    END LOOP;
END $$;
