-- The token index (core/privacy/token_index.py) after a TERM_HASH_KEY rotation, and in the recount mode (issue 51).
--
-- term_key: the fingerprint of the term hash key the row's token hashes were made with (an HMAC of a constant under
-- the key, core.privacy.tokens.term_key_fingerprint; never the key). A row made under another key answers no lookup
-- made with the running key: the residue scan reads such threads on their bytes, like threads not indexed yet, and
-- the sweep lists them again for indexing. Rows indexed before this migration have none: read and re-indexed.
--
-- rows_sig: what the indexer read of the thread, as a signature of the keys of its checkpoints and pending writes
-- (core.capture.recount.ROWS_SIGNATURE). Where no change follower runs, the sweep's recount lists again every thread
-- whose rows differ from it, whatever times its checkpoints carry (a replayed journal keeps its original times).
ALTER TABLE core_thread_tokens ADD COLUMN IF NOT EXISTS term_key text;
ALTER TABLE core_thread_tokens ADD COLUMN IF NOT EXISTS rows_sig numeric;
CREATE INDEX IF NOT EXISTS core_thread_tokens_term_key_idx ON core_thread_tokens (term_key);
