-- The change follower never stops for one bad row (issue 51): a change it cannot decode or apply is recorded here
-- and skipped, every other change of its batch and after it applied, in the same transaction as the position it
-- reached (exactly once, as the aggregates). The aggregates the row touches (`unknown`: each with the prefix, root,
-- customer or thread it is about) are unknown until a recount: the pages say so, the exporter counts the open ones
-- (agent_memory_capture_dead_letters) and an alert fires. A recount of the follower (`python -m
-- core.capture.follower --recount`, or when it recreates its slot) sets `recounted_at` on every open one.
CREATE TABLE IF NOT EXISTS core_capture_dead_letters (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    slot_name     text        NOT NULL,
    lsn           pg_lsn      NOT NULL,  -- the change's position in the slot's stream
    xid           bigint      NOT NULL,  -- the agents' transaction that wrote it
    table_name    text        NOT NULL,
    row_key       text        NOT NULL,  -- "prefix / key", "thread / ns / checkpoint", or "?" when unreadable
    error         text        NOT NULL,
    unknown       text[]      NOT NULL,
    recorded_at   timestamptz NOT NULL DEFAULT now(),
    recounted_at  timestamptz
);
CREATE INDEX IF NOT EXISTS core_capture_dead_letters_open_idx
    ON core_capture_dead_letters (recorded_at) WHERE recounted_at IS NULL;

-- An operator's request that the follower recount its aggregates (it holds the follower lock: it recounts itself,
-- at its next read, and deletes the request).
CREATE TABLE IF NOT EXISTS core_capture_recount_requests (
    slot_name     text PRIMARY KEY,
    requested_at  timestamptz NOT NULL DEFAULT now()
);
