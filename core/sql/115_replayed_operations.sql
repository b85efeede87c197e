-- Operations of the dual saver's resync log already in PostgreSQL (issue 42 #3, issue 43 #2). Every buffered
-- operation carries an id (core.checkpoints.degraded_buffer); a replay claims the ids of what it writes here, in
-- its own transaction, and skips an operation whose id is already here. So a journal that still holds committed
-- operations (a crash between the replay's commit and the journal's rewrite or removal) applies nothing twice:
-- no turn copied again to a conflict thread, no delete replayed over a newer turn. Rows older than 90 days go
-- with the next replay (core.checkpoints.recovery): a journal is replayed at its replica's next start.
CREATE TABLE IF NOT EXISTS core_replayed_operations (
    op_id uuid PRIMARY KEY,
    replica_id text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS core_replayed_operations_applied ON core_replayed_operations (applied_at);
