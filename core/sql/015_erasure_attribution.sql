-- Erasure on attributed threads (core/privacy/subjects.py): which source found each thread, the residue
-- threads the DPO included or left (with the reason), and an `interrupted` outcome for an erasure stopped
-- midway (a Streamlit rerun/stop is a BaseException raised from the progress callback).
ALTER TABLE core_erasure_register
    ADD COLUMN IF NOT EXISTS sources      jsonb,   -- {thread_id: [source, ...]} as resolved before deleting
    ADD COLUMN IF NOT EXISTS residue      jsonb,   -- [{thread_id, terms, decision: erase|leave|undecided, reason}]
    ADD COLUMN IF NOT EXISTS residue_terms jsonb,  -- [{term, kind, customers, threads, common}] read before deleting
    ADD COLUMN IF NOT EXISTS exclusions   jsonb,   -- [{thread_id, reason}] left by the DPO: named in the evidence
    ADD COLUMN IF NOT EXISTS resumed_by   bigint REFERENCES core_erasure_register (id);

ALTER TABLE core_erasure_register DROP CONSTRAINT IF EXISTS core_erasure_register_status_check;
ALTER TABLE core_erasure_register ADD CONSTRAINT core_erasure_register_status_check
    CHECK (status IN ('running', 'complete', 'incomplete', 'failed', 'interrupted'));

-- Threads an erasure deleted: a replica checks this before replaying its buffer or seeding its cache
-- (issue 16 finding 8). The saver's migration 010 creates the same table; whichever runs first wins.
CREATE TABLE IF NOT EXISTS core_thread_tombstones (
    thread_id  text PRIMARY KEY,
    request_id bigint,
    erased_at  timestamptz NOT NULL DEFAULT now()
);
