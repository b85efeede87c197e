-- Dead letters of the dual saver (issue 25 #4): a buffered operation PostgreSQL refused on replay with a
-- non-connection error (e.g. a string with NUL: UntranslatableCharacter). The resync then replays operation
-- by operation, moves the refused one here and lets the rest through, so one bad write never keeps a replica
-- degraded. `payload` is the operation as the saver stored it (its journal encoding: msgpack of
-- [kind, rows]); it is the customer's data, erased with the thread.
CREATE TABLE IF NOT EXISTS core_checkpoint_dead_letters (
    id bigserial PRIMARY KEY,
    replica_id text NOT NULL,
    thread_id text NOT NULL,
    kind text NOT NULL,
    error text NOT NULL,
    payload bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS core_checkpoint_dead_letters_thread ON core_checkpoint_dead_letters (thread_id);
CREATE INDEX IF NOT EXISTS core_checkpoint_dead_letters_created ON core_checkpoint_dead_letters (created_at DESC);
