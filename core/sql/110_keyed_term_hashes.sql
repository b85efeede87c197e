-- Stored hashes of customer values are keyed with a secret that is not in the database (issue 43, finding 1;
-- core.config.term_hash_key). Before, the token index and the erasure register kept unkeyed 32-bit hashes of tokens
-- and a digest keyed with a salt stored in the same row: hashing guesses recovered an erased phone number.
--
-- 1. The token index is rebuilt under the key: its rows are dropped and every thread is listed for the next sweep
--    (until then the residue scan reads unindexed threads on their bytes, as for any thread not indexed yet).
DELETE FROM core_thread_tokens;
INSERT INTO core_token_dirty (thread_id)
SELECT thread_id FROM checkpoints
UNION SELECT thread_id FROM checkpoint_blobs
UNION SELECT thread_id FROM checkpoint_writes
ON CONFLICT (thread_id) DO NOTHING;

-- 2. The register's rows written before hold unkeyed hashes (`tokens`, `first`) and a digest whose key (`term_salt`)
--    is beside it; they cannot be re-keyed (the values are gone), so they are dropped, and the request is marked:
--    its re-check can no longer look for its residue terms, a new erasure of the customer is needed for that.
--    (residue_terms is outside the register's hash chain, migration 053.)
ALTER TABLE core_erasure_register ADD COLUMN IF NOT EXISTS residue_terms_dropped_at timestamptz;
UPDATE core_erasure_register
SET residue_terms = NULL, term_salt = NULL, residue_terms_dropped_at = now()
WHERE term_salt IS NOT NULL;  -- rows without a salt still keep verbatim terms: core.migrate's repair (056) hashes
                               -- them after the migrations, keyed

-- 3. Readers that need counts, not rows (the exporter): a view with the counts, owned by the tables' owner.
CREATE OR REPLACE VIEW core_erasure_register_counts AS
SELECT count(*) FILTER (WHERE status IN ('incomplete', 'failed'))                              AS incomplete,
       count(*) FILTER (WHERE status = 'running' AND requested_at < now() - interval '1 hour')   AS stuck,
       count(*) FILTER (WHERE r.status = 'complete' AND r.last_recheck_clean IS FALSE
                        AND NOT EXISTS (SELECT 1 FROM core_erasure_register n
                                        WHERE n.customer_id = r.customer_id
                                          AND (n.requested_at, n.id) > (r.requested_at, r.id)))  AS data_back,
       count(*) FILTER (WHERE residue_terms_dropped_at IS NOT NULL)                              AS terms_dropped
FROM core_erasure_register r;
-- deploy/exporter-grants.sql grants the exporter this view and revokes its SELECT on the register's rows.
