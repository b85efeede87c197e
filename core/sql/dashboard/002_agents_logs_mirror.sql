-- The dashboard's own database (issue 52, A'): mirrors of the agents' own logs. core_conversations and
-- core_memory_writes are written by agent-side code and stay in the agents' database; the change follower decodes
-- them (publication core_capture, agents'-side migration 171) and applies their inserts, updates and deletes here
-- with each of its batches, exactly once (core/capture/follower.py, MIRROR_SQL); its recount copies them whole
-- (copy_mirrors). Same columns and indexes as the agents' tables (001_memory_logs.sql), without the sequence: the ids
-- are the agents'. core.capture.verify.differences compares them with the agents' rows.
--
-- UNLOGGED like the follower's other tables (001_capture.sql): copied again by the recount whenever they are lost.

CREATE UNLOGGED TABLE core_conversations (
    thread_id text NOT NULL,
    agent text NOT NULL,
    subject_root text NOT NULL,
    subject_id text NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    last_turn_at timestamp with time zone DEFAULT now() NOT NULL,
    turns integer DEFAULT 1 NOT NULL
);

CREATE UNLOGGED TABLE core_memory_writes (
    id bigint NOT NULL,
    written_at timestamp with time zone DEFAULT now() NOT NULL,
    prefix text NOT NULL,
    root text GENERATED ALWAYS AS (split_part(prefix, '.'::text, 1)) STORED,
    key text NOT NULL,
    thread_id text,
    agent text
);

ALTER TABLE ONLY core_conversations
    ADD CONSTRAINT core_conversations_pkey PRIMARY KEY (thread_id);

ALTER TABLE ONLY core_memory_writes
    ADD CONSTRAINT core_memory_writes_pkey PRIMARY KEY (id);

CREATE INDEX core_conversations_started_idx ON core_conversations USING btree (started_at);

CREATE INDEX core_conversations_subject_idx ON core_conversations USING btree (subject_root, subject_id);

CREATE INDEX core_memory_writes_prefix_idx ON core_memory_writes USING btree (prefix text_pattern_ops);

CREATE INDEX core_memory_writes_thread_idx ON core_memory_writes USING btree (thread_id);

CREATE INDEX core_memory_writes_written_at_idx ON core_memory_writes USING btree (written_at);
