-- Append-only log of every memory write made by the agents' tools (no values, by design:
-- it must not become a second copy of personal data). Exact per conversation, including
-- writes later overwritten in `store`, and cheap: one indexed row per write.
CREATE TABLE IF NOT EXISTS core_memory_writes (
    id          bigserial PRIMARY KEY,
    written_at  timestamptz NOT NULL DEFAULT now(),
    prefix      text        NOT NULL,
    root        text        GENERATED ALWAYS AS (split_part(prefix, '.', 1)) STORED,
    key         text        NOT NULL,
    thread_id   text,
    agent       text
);
CREATE INDEX IF NOT EXISTS core_memory_writes_written_at_idx ON core_memory_writes (written_at);
CREATE INDEX IF NOT EXISTS core_memory_writes_prefix_idx ON core_memory_writes (prefix text_pattern_ops);
CREATE INDEX IF NOT EXISTS core_memory_writes_thread_idx ON core_memory_writes (thread_id);

-- One row per agent conversation (thread), upserted at every turn by the agents' middleware:
-- the denominator of "preference writes per conversation", and how a customer's threads are
-- listed without scanning checkpoint metadata.
CREATE TABLE IF NOT EXISTS core_conversations (
    thread_id     text PRIMARY KEY,
    agent         text        NOT NULL,
    subject_root  text        NOT NULL,   -- clientes / proveedores / empleados
    subject_id    text        NOT NULL,   -- the customer, supplier or employee id
    started_at    timestamptz NOT NULL DEFAULT now(),
    last_turn_at  timestamptz NOT NULL DEFAULT now(),
    turns         integer     NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS core_conversations_started_idx ON core_conversations (started_at);
CREATE INDEX IF NOT EXISTS core_conversations_subject_idx ON core_conversations (subject_root, subject_id);
