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
-- The extraction (core/history/tool_calls.py; core/sql/dashboard/010): the sweep job (and a page run by a role that
-- may) extracts into these, prunes the rows of deleted threads and moves the watermark; the six rollups are kept by
-- statement triggers with the privileges of the role that writes the base tables, whose functions it must execute.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agent_memory_sweeper') THEN  -- ours on a server of its own
        CREATE ROLE agent_memory_sweeper LOGIN;
    END IF;
END
$$;
GRANT CONNECT ON DATABASE agent_memory_dashboard TO agent_memory_sweeper;
GRANT USAGE ON SCHEMA public TO agent_memory_sweeper;
GRANT SELECT, INSERT, UPDATE, DELETE ON core_tool_calls, core_thread_days, core_refused_payloads, core_thread_summary,
    core_message_usage, core_usage_threads, core_usage_days, core_message_no_usage TO agent_memory_sweeper;
GRANT SELECT, INSERT, UPDATE ON core_extract_watermark TO agent_memory_sweeper;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON core_tool_call_days, core_tool_call_subject_days,
    core_tool_call_day_pairs, core_tool_call_thread_days, core_thread_last, core_thread_day_pairs TO agent_memory_sweeper;
GRANT SELECT ON core_checkpoint_shadow, core_capture_position TO agent_memory_sweeper;
GRANT EXECUTE ON FUNCTION core_tool_call_rollups_apply(core_tool_call_delta[]), core_tool_call_pairs_of(text[], text[],
    text[]), core_thread_days_apply(text[], date[], text[], date[]), core_preference_rollups_lock(),
    core_tool_calls_rollup(), core_tool_calls_rollup_truncate(), core_thread_days_rollup(),
    core_thread_days_rollup_truncate() TO agent_memory_sweeper;
-- The sweep's own log, its storage figures and the prune's pending blob keys (core/sql/dashboard/020, clusters D and
-- F): the run's row and its details, the storage refresh (DELETE also allows the refresh's LOCK TABLE ... IN EXCLUSIVE
-- MODE), the attribution coverage, which reads the follower's `hilo` links, the mirror of core_conversations and the
-- threads the erasure register names.
GRANT SELECT, INSERT, UPDATE ON core_sweep_log TO agent_memory_sweeper;
GRANT USAGE ON SEQUENCE core_sweep_log_id_seq TO agent_memory_sweeper;
GRANT SELECT, INSERT ON core_sweep_documents, core_prune_threads TO agent_memory_sweeper;
GRANT SELECT, INSERT, DELETE ON core_prune_pending_blobs TO agent_memory_sweeper;
GRANT SELECT, INSERT, DELETE ON core_thread_storage, core_channel_storage, core_thread_growth, core_thread_orphans
    TO agent_memory_sweeper;
GRANT SELECT, INSERT, UPDATE ON core_thread_storage_refresh, core_coverage_snapshot TO agent_memory_sweeper;
GRANT SELECT ON core_store_shadow, core_conversations, core_erasure_register TO agent_memory_sweeper;
-- Which store each customer belongs to (core/memory/customer_stores.py; core/sql/dashboard/011): the sweep job
-- refreshes the mapping here from what it reads on the agents' side (the metadata source's `hilo` and conversation
-- lookups in the shadow and the mirror of the conversation log, here too).
GRANT SELECT, INSERT, UPDATE, DELETE ON core_customer_stores, core_customer_store_sources TO agent_memory_sweeper;
GRANT SELECT, INSERT, UPDATE ON core_customer_store_refresh TO agent_memory_sweeper;
GRANT SELECT ON core_store_shadow, core_conversations, core_prefix_counts TO agent_memory_sweeper;
