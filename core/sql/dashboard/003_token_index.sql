-- The dashboard's own database (issue 52, B): the token index of checkpoint threads (core/privacy/token_index.py),
-- as the agents'-side migrations 042, 073, 110 and 151 left it (pg_dump of a migrated database). The indexer reads the
-- agents' checkpoint rows where the change follower reads them (their standby when configured) and writes here; the
-- residue scan and the erasure's re-checks look terms up here (token_index.candidates_of, count_hits, token_shares).
--
-- UNLOGGED like core_token_dirty (001_capture.sql), the marks it is kept with: what a crash empties is rebuilt. Every
-- table of 001 is emptied with it, so the follower finds no position, recounts and marks every thread dirty
-- (follower.MARK_ALL_THREADS); in the recount mode (no slot) every thread's signature differs from the emptied index
-- and core.capture.recount lists it. Meanwhile the index answers for no thread it has not read again, and the residue
-- scan reads those threads on their bytes (or every thread past token_index.DIRTY_SCAN_MAX). No backfill here: the
-- upgrade in place copies the agents' copy, the first recount lists every thread otherwise.

CREATE UNLOGGED TABLE core_thread_tokens (
    thread_id text NOT NULL,
    tokens integer[] NOT NULL,
    indexed_at timestamp with time zone DEFAULT now() NOT NULL,
    encrypted_unread integer DEFAULT 0 NOT NULL,
    key_set text,
    term_key text,
    rows_sig numeric
);

ALTER TABLE ONLY core_thread_tokens
    ADD CONSTRAINT core_thread_tokens_pkey PRIMARY KEY (thread_id);

CREATE INDEX core_thread_tokens_encrypted_idx ON core_thread_tokens USING btree (thread_id)
    WHERE ((encrypted_unread > 0) OR (key_set IS NOT NULL));

CREATE INDEX core_thread_tokens_gin ON core_thread_tokens USING gin (tokens);

CREATE INDEX core_thread_tokens_term_key_idx ON core_thread_tokens USING btree (term_key);
