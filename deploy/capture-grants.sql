-- The change follower's role (deploy/capture-deployment.yaml): REPLICATION to create and read its logical slot,
-- SELECT on the agents' tables for the recount when its slot is created (nothing else on them), and the rows it keeps
-- in our schema. Run once by a DBA, after the migrations Job (which creates the publication as the tables' owner).
CREATE ROLE agent_memory_capture LOGIN REPLICATION PASSWORD 'change-me';
GRANT CONNECT ON DATABASE agentes TO agent_memory_capture;
GRANT USAGE ON SCHEMA public TO agent_memory_capture;
GRANT SELECT ON store, store_vectors, checkpoints, checkpoint_blobs, checkpoint_writes TO agent_memory_capture;
-- The agents' own logs it mirrors into the dashboard's own database (migration 171): read for the recount's copy and
-- for a row the stream sent without a column; never written.
GRANT SELECT ON core_conversations, core_memory_writes TO agent_memory_capture;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON core_prefix_counts, core_root_counts, core_expiry_days,
    core_value_holders, core_store_shadow, core_checkpoint_shadow, core_token_dirty, core_capture_position
    TO agent_memory_capture;
-- The rows it cannot apply and the recounts asked of it (migration 152).
GRANT SELECT, INSERT, UPDATE ON core_capture_dead_letters TO agent_memory_capture;
GRANT SELECT, DELETE ON core_capture_recount_requests TO agent_memory_capture;
GRANT EXECUTE ON FUNCTION core_string_leaves(jsonb), core_value_holders_of(text, jsonb), core_metadata_subjects(jsonb)
    TO agent_memory_capture;
-- A running-transactions record after each batch it applied (at most once a second), so each read of the slot starts
-- there instead of decoding up to 15 s of the agents' WAL again (core/capture/follower.py, SNAPSHOT_S).
GRANT EXECUTE ON FUNCTION pg_log_standby_snapshot() TO agent_memory_capture;
