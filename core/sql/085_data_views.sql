-- Who looked at a customer's data (issue 31 item 4): one row per view of a customer's memory (Memory page), of a
-- customer's thread (Checkpoints) and per access preview or export (Access), written by the dashboard
-- (core/privacy/data_views.py). It keeps who, with which role, what (the namespace, thread or request by its id:
-- never a value of the customer's data), when, and the purpose when the configuration asks for one.
-- Hash-chained like the registers (chain 'views' in core_register_chain, sealed on insert): editing or deleting a
-- row by SQL breaks the chain at that row (core/privacy/chain.py). Its retention (DATA_VIEWS_RETENTION_DAYS) is
-- applied by the sweep job, which deletes the oldest rows with their links and records the cut in
-- core_register_cuts: the chain then verifies from the cut's hash. An erasure keeps these rows (a proof, like the
-- registers: ids, no values).
CREATE TABLE IF NOT EXISTS core_data_views (
    id          bigserial   PRIMARY KEY,
    viewed_at   timestamptz NOT NULL DEFAULT now(),
    viewer      text        NOT NULL CHECK (viewer <> ''),   -- signed-in e-mail or name, "local" in local mode
    role        text        NOT NULL,                        -- the role the page requires (manager, sre, dpo)
    kind        text        NOT NULL CHECK (kind IN ('namespace', 'thread', 'search', 'access_preview',
                                                     'access_export')),
    customer_id text,                                        -- whose data; NULL for a holder that is not a customer
    target      text        NOT NULL,                        -- namespace prefix, thread id, or the request (its id)
    purpose     text                                         -- why, when the configuration requires a purpose
);
CREATE INDEX IF NOT EXISTS core_data_views_customer_idx ON core_data_views (customer_id, viewed_at);
CREATE INDEX IF NOT EXISTS core_data_views_at_idx ON core_data_views (viewed_at);

-- A chain's retention cut: the links up to `position` were deleted with their rows by the sweep; the next link's
-- prev_hash is `row_hash`. Kept forever (one row per sweep that deleted something).
CREATE TABLE IF NOT EXISTS core_register_cuts (
    chain          text        NOT NULL,
    position       bigint      NOT NULL,
    row_hash       text        NOT NULL,
    rows_deleted   bigint      NOT NULL,
    retention_days integer     NOT NULL,
    cut_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (chain, position)
);

ALTER TABLE core_sweep_log ADD COLUMN IF NOT EXISTS data_views_deleted bigint;

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
    ELSIF tbl = 'core_register_redactions' THEN
        SELECT jsonb_strip_nulls(to_jsonb(r)) INTO doc FROM core_register_redactions r WHERE r.id = rid;
    ELSIF tbl = 'core_data_views' THEN
        SELECT jsonb_strip_nulls(to_jsonb(r)) INTO doc FROM core_data_views r WHERE r.id = rid;
    ELSE
        RAISE EXCEPTION 'not a sealed register table: %', tbl;
    END IF;
    RETURN doc::text;
END $$;
REVOKE ALL ON FUNCTION core_register_content(text, bigint) FROM PUBLIC;

CREATE OR REPLACE FUNCTION core_register_seal(chain_name text, tbl text, rid bigint) RETURNS void
LANGUAGE plpgsql AS $$
-- As 036's, but a chain whose links were all cut by retention goes on from its last cut.
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
    IF last.position IS NULL THEN
        SELECT position, row_hash INTO last FROM core_register_cuts k
        WHERE k.chain = chain_name ORDER BY position DESC LIMIT 1;
    END IF;
    prev := coalesce(last.row_hash, '');
    INSERT INTO core_register_chain (chain, position, table_name, row_id, content_sha256, prev_hash, row_hash)
    VALUES (chain_name, coalesce(last.position, 0) + 1, tbl, rid, content_hash, prev,
            encode(sha256(convert_to(prev || '|' || tbl || '|' || rid::text || '|' || content_hash, 'UTF8')), 'hex'));
END $$;
REVOKE ALL ON FUNCTION core_register_seal(text, text, bigint) FROM PUBLIC;

DROP TRIGGER IF EXISTS core_data_views_seal ON core_data_views;
CREATE TRIGGER core_data_views_seal AFTER INSERT ON core_data_views
    FOR EACH ROW EXECUTE FUNCTION core_register_seal_trigger('views');
