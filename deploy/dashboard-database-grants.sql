-- The dashboard's own database (PG_DASHBOARD, issue 52), run once by a DBA after the migrations Job has created and
-- migrated it (`python -m core.migrate`, as the role that owns the dashboard's tables). It holds what the change
-- follower keeps and, as the other tables of ours move there (docs/own-database-plan.md), who asked to erase whom:
-- no role of the agents connects to it.
REVOKE CONNECT, TEMPORARY ON DATABASE agent_memory_dashboard FROM PUBLIC;
-- The change follower (deploy/capture-deployment.yaml). On the agents' side it then needs only what
-- capture-grants.sql gives it on their tables: REPLICATION, SELECT, and pg_log_standby_snapshot() on their primary.
GRANT CONNECT ON DATABASE agent_memory_dashboard TO agent_memory_capture;
GRANT USAGE ON SCHEMA public TO agent_memory_capture;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON core_prefix_counts, core_root_counts, core_expiry_days,
    core_value_holders, core_store_shadow, core_checkpoint_shadow, core_token_dirty, core_capture_position,
    core_capture_dead_letters, core_capture_recount_requests, core_recount_store, core_recount_vectors,
    core_recount_checkpoints, core_recount_threads
    TO agent_memory_capture;
-- Its mirrors of the agents' own logs (core/sql/dashboard/002).
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON core_conversations, core_memory_writes TO agent_memory_capture;
GRANT EXECUTE ON FUNCTION core_string_leaves(jsonb), core_value_holders_of(text, jsonb), core_metadata_subjects(jsonb)
    TO agent_memory_capture;
