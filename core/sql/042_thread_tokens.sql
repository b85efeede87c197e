-- The token index of checkpoint threads (core/privacy/token_index.py), so that an erasure's residue scan
-- reads the threads that may hold a customer's terms instead of every unattributed checkpoint row (214 s
-- for one customer at 10M checkpoint writes, BENCHMARKS.md).
--
-- core_thread_tokens: one row per thread, the hashes of every token (a run of [A-Za-z0-9_%]) of its
-- decoded payloads, pending writes and inline channel values; a GIN index finds the threads holding all
-- the tokens of a term. It only narrows the scan: the candidates are then matched on their bytes and
-- confirmed by the SQL decoder, as before. It names threads (thread_id) and holds what customers said
-- (hashed), so an erasure deletes its rows like every other core_* table's.
CREATE TABLE IF NOT EXISTS core_thread_tokens (
    thread_id   text PRIMARY KEY,
    tokens      integer[]   NOT NULL,
    indexed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS core_thread_tokens_gin ON core_thread_tokens USING gin (tokens);

-- Threads written since they were last indexed, kept by the statement-level triggers below for any
-- writer (our dual saver, a stock PostgresSaver, a bulk COPY). A thread listed here is scanned on its
-- bytes by the residue scan until the indexer (the sweep job's step) has read it again. The indexer
-- claims rows (claimed_at), reads the threads in a later snapshot, then deletes only rows still
-- claimed: a write after the claim sets claimed_at back to NULL, so its thread stays listed.
CREATE TABLE IF NOT EXISTS core_token_dirty (
    thread_id   text PRIMARY KEY,
    claimed_at  timestamptz
);

-- SECURITY DEFINER: the agents' own database role (whatever it is, for agents we did not write) needs no
-- privilege on core_token_dirty; without it their checkpoint writes would fail on this trigger.
CREATE OR REPLACE FUNCTION core_mark_threads_dirty() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM changed) THEN  -- an upsert fires the UPDATE trigger even when it updated no row
        RETURN NULL;
    END IF;
    -- On a listed, unclaimed thread (a busy thread between two indexer runs) this only locks the row.
    INSERT INTO core_token_dirty AS d (thread_id)
    SELECT DISTINCT thread_id FROM changed ORDER BY thread_id
    ON CONFLICT (thread_id) DO UPDATE SET claimed_at = NULL WHERE d.claimed_at IS NOT NULL;
    RETURN NULL;
END
$$;

DO $$
DECLARE
    t text;
    op text;
BEGIN
    FOREACH t IN ARRAY ARRAY['checkpoints', 'checkpoint_blobs', 'checkpoint_writes'] LOOP
        FOREACH op IN ARRAY ARRAY['insert', 'update'] LOOP
            EXECUTE format('DROP TRIGGER IF EXISTS %I ON %I', 'core_tokens_dirty_' || op, t);
            EXECUTE format('CREATE TRIGGER %I AFTER %s ON %I REFERENCING NEW TABLE AS changed '
                           'FOR EACH STATEMENT EXECUTE FUNCTION core_mark_threads_dirty()',
                           'core_tokens_dirty_' || op, upper(op), t);
        END LOOP;
    END LOOP;
END
$$;

-- Every thread already there is listed (indexed by the next sweep; scanned on its bytes until then).
INSERT INTO core_token_dirty (thread_id)
SELECT thread_id FROM checkpoints
UNION SELECT thread_id FROM checkpoint_blobs
UNION SELECT thread_id FROM checkpoint_writes
ON CONFLICT (thread_id) DO NOTHING;

ALTER TABLE core_sweep_log ADD COLUMN IF NOT EXISTS threads_tokenized bigint;
