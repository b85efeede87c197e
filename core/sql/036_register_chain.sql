-- Tamper-evident registers (core/privacy/chain.py). Each sealed register row gets one link here:
-- the sha256 of the row's canonical content and the hash of the previous link of the same chain, so
-- editing or deleting a sealed row (or a link) by SQL breaks the chain at that row.
--   chain 'access':  core_access_register rows, sealed on insert;
--   chain 'erasure': core_erasure_register rows, sealed when they reach a final status (complete,
--                    incomplete, failed; a running request still changes), and core_erasure_rechecks
--                    rows, sealed on insert.
-- Sealing is done by triggers, so the code that writes the registers needs no change.
-- The canonical content is the row as jsonb text, rendered in UTC, without the columns that legitimately
-- change after the row is final (last_recheck_at / last_recheck_clean, set by re-checks, which are sealed
-- themselves; resumed_by, the forward link a resumed request gets), and without null values, so that a
-- nullable column added by a later migration does not change the content of rows sealed before it.
-- The verifier hashes the same text in Python and recomputes every link.
CREATE TABLE IF NOT EXISTS core_register_chain (
    chain          text        NOT NULL,
    position       bigint      NOT NULL,              -- 1, 2, 3 ... per chain: a gap is a removed link
    table_name     text        NOT NULL,
    row_id         bigint      NOT NULL,
    content_sha256 text        NOT NULL,
    prev_hash      text        NOT NULL,              -- row_hash of position - 1 ('' for the first)
    row_hash       text        NOT NULL,              -- sha256(prev_hash | table | row_id | content_sha256)
    sealed_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (chain, position),
    UNIQUE (table_name, row_id)
);

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

CREATE OR REPLACE FUNCTION core_register_seal(chain_name text, tbl text, rid bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    content text := core_register_content(tbl, rid);
    content_hash text := encode(sha256(convert_to(content, 'UTF8')), 'hex');
    last record;
    prev text;
BEGIN
    IF EXISTS (SELECT 1 FROM core_register_chain c WHERE c.table_name = tbl AND c.row_id = rid) THEN
        RETURN;  -- sealed once; a later change is what verification is there to catch
    END IF;
    -- one sealer per chain at a time: two concurrent seals must not both link to the same head
    PERFORM pg_advisory_xact_lock(hashtext('core_register_chain'), hashtext(chain_name));
    SELECT position, row_hash INTO last FROM core_register_chain c
    WHERE c.chain = chain_name ORDER BY position DESC LIMIT 1;
    prev := coalesce(last.row_hash, '');
    INSERT INTO core_register_chain (chain, position, table_name, row_id, content_sha256, prev_hash, row_hash)
    VALUES (chain_name, coalesce(last.position, 0) + 1, tbl, rid, content_hash, prev,
            encode(sha256(convert_to(prev || '|' || tbl || '|' || rid::text || '|' || content_hash, 'UTF8')), 'hex'));
END $$;

CREATE OR REPLACE FUNCTION core_register_seal_trigger() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM core_register_seal(TG_ARGV[0], TG_TABLE_NAME::text, NEW.id);
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS core_access_register_seal ON core_access_register;
CREATE TRIGGER core_access_register_seal AFTER INSERT ON core_access_register
    FOR EACH ROW EXECUTE FUNCTION core_register_seal_trigger('access');

DROP TRIGGER IF EXISTS core_erasure_register_seal_insert ON core_erasure_register;
CREATE TRIGGER core_erasure_register_seal_insert AFTER INSERT ON core_erasure_register
    FOR EACH ROW WHEN (NEW.status <> 'running') EXECUTE FUNCTION core_register_seal_trigger('erasure');
DROP TRIGGER IF EXISTS core_erasure_register_seal_final ON core_erasure_register;
CREATE TRIGGER core_erasure_register_seal_final AFTER UPDATE OF status ON core_erasure_register
    FOR EACH ROW WHEN (OLD.status = 'running' AND NEW.status <> 'running')
    EXECUTE FUNCTION core_register_seal_trigger('erasure');

DROP TRIGGER IF EXISTS core_erasure_rechecks_seal ON core_erasure_rechecks;
CREATE TRIGGER core_erasure_rechecks_seal AFTER INSERT ON core_erasure_rechecks
    FOR EACH ROW EXECUTE FUNCTION core_register_seal_trigger('erasure');

-- Rows written before this migration are sealed now, in the order they were written.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT t.tbl, t.id
             FROM (SELECT 'core_erasure_register' AS tbl, id, coalesce(finished_at, requested_at) AS at
                   FROM core_erasure_register WHERE status <> 'running'
                   UNION ALL
                   SELECT 'core_erasure_rechecks', id, checked_at FROM core_erasure_rechecks) t
             ORDER BY t.at, t.tbl, t.id LOOP
        PERFORM core_register_seal('erasure', r.tbl, r.id);
    END LOOP;
END $$;
