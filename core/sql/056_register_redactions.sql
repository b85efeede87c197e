-- The erasure register keeps no value of what it erased (issue 25, data protection). Until this migration a
-- request's residue_terms, residue, exclusions and evidence (the residue query with its terms inlined), and each
-- re-check's evidence, held the customer's document values verbatim, sealed in the hash chain.
--
-- From here the erasure writes the terms as keyed hashes (term_salt is the request's random key; see
-- core/privacy/term_hashes.py) and names them by reference. Rows written before are repaired by
-- core.privacy.redaction.redact_register, which `python -m core.migrate` runs after the SQL files (the terms'
-- token hashes need Python): a documented redaction step that keeps the chains verifiable. Each redacted row
-- that was sealed gets a record here, itself sealed in the same chain: the content hash the row's link holds,
-- whether the row still hashed to it just before (intact), and its content hash right after. The verifier
-- (core/privacy/chain.py) accepts a row whose content no longer matches its link only through such a record
-- (sealed, intact, and matching the row as it is now), and says what was redacted and when. A record can only
-- be added by appending to the chain, which moves the head hash that was kept elsewhere.
ALTER TABLE core_erasure_register ADD COLUMN IF NOT EXISTS term_salt text;  -- hex key of the terms' hashes

CREATE TABLE IF NOT EXISTS core_register_redactions (
    id              bigserial   PRIMARY KEY,
    table_name      text        NOT NULL,
    row_id          bigint      NOT NULL,
    fields          text[]      NOT NULL,  -- the columns whose values were replaced
    sealed_sha256   text        NOT NULL,  -- the content hash the row's chain link holds
    intact          boolean     NOT NULL,  -- the row hashed to sealed_sha256 right before the redaction
    redacted_sha256 text        NOT NULL,  -- the row's content hash right after it
    reason          text        NOT NULL,
    redacted_at     timestamptz NOT NULL DEFAULT now(),
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
    ELSIF tbl = 'core_register_redactions' THEN
        SELECT jsonb_strip_nulls(to_jsonb(r)) INTO doc FROM core_register_redactions r WHERE r.id = rid;
    ELSE
        RAISE EXCEPTION 'not a sealed register table: %', tbl;
    END IF;
    RETURN doc::text;
END $$;
REVOKE ALL ON FUNCTION core_register_content(text, bigint) FROM PUBLIC;

DROP TRIGGER IF EXISTS core_register_redactions_seal ON core_register_redactions;
CREATE TRIGGER core_register_redactions_seal AFTER INSERT ON core_register_redactions
    FOR EACH ROW EXECUTE FUNCTION core_register_seal_trigger('erasure');
