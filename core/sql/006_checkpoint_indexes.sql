-- Indexes behind the Checkpoints page: threads by customer (the id the agents put in checkpoint
-- metadata) and by recent activity (checkpoint->>'ts' is ISO 8601 in UTC, so text order is time
-- order). Plain CREATE INDEX because migrations run in a transaction: on a large production
-- table create them CONCURRENTLY by hand first; IF NOT EXISTS then skips them here.
CREATE INDEX IF NOT EXISTS core_checkpoints_cliente_idx ON checkpoints ((metadata ->> 'cliente_id'));
CREATE INDEX IF NOT EXISTS core_checkpoints_ts_idx ON checkpoints ((checkpoint ->> 'ts'));
