-- Read-only role for the database-side Prometheus exporter (`python -m core.operations.exporter`).
-- Run once as the owner of the agents' tables, after `python -m core.migrate`; re-run after a
-- migration adds one of the tables below. The exporter only SELECTs, in a read-only transaction.
--
--   core_replica_heartbeat  replicas by state, heartbeat age
--   store, core_expiry_days expired-not-swept per root: the days before today from core_expiry_days (040),
--                           today's slice from store's expires_at index
--   core_sweep_log          last sweep: when and its outcome
--   core_erasure_register_counts
--                           requests incomplete / data back on re-check (counts only: the register's
--                           rows are not readable by this role, migration 110)
--   core_prefix_counts      customers above the 4-document schema
--   checkpoints, checkpoint_blobs, checkpoint_writes, core_conversations
--                           attribution coverage (core.privacy.subjects.coverage), in the background
--                           at most every 15 min, never at scrape time
--   core_thread_summary, core_usage_days
--                           threads by status, LLM tokens and cost per agent and model
--   core_data_view_gaps     views of customer data the dashboards could not record (migration 087)
--   core_capture_position   the change follower's lag (with pg_replication_slots, pg_locks)
--   core_capture_dead_letters  rows the follower could not apply, open until a recount
--   checkpoint_migrations   with the three checkpoint tables: the storage-format fingerprint
--                           (core.history.formats), in the background like the coverage
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agent_memory_exporter') THEN
        CREATE ROLE agent_memory_exporter LOGIN;
    END IF;
END
$$;
ALTER ROLE agent_memory_exporter SET default_transaction_read_only = on;
GRANT USAGE ON SCHEMA public TO agent_memory_exporter;
-- granted before migration 110: the register's rows hold hashes of erased values, the exporter needs counts only
REVOKE SELECT ON core_erasure_register FROM agent_memory_exporter;
GRANT SELECT ON core_replica_heartbeat, store, core_expiry_days, core_sweep_log, core_erasure_register_counts,
    core_prefix_counts TO agent_memory_exporter;
GRANT SELECT ON checkpoints, checkpoint_blobs, checkpoint_writes, checkpoint_migrations, core_conversations
    TO agent_memory_exporter;
-- Threads by status and LLM tokens/cost (migration 080, kept by the extraction).
GRANT SELECT ON core_thread_summary, core_usage_days TO agent_memory_exporter;
-- Views of customer data not recorded (migration 087).
GRANT SELECT ON core_data_view_gaps TO agent_memory_exporter;
-- The change follower's position: its lag (migration 140; the slot and the lock are read from pg_catalog views).
GRANT SELECT ON core_capture_position TO agent_memory_exporter;
-- The rows the follower could not apply, open until a recount (migration 152).
GRANT SELECT ON core_capture_dead_letters TO agent_memory_exporter;

-- Our functions are not executable by PUBLIC (migration 050); the coverage reads the SQL decoder through our
-- views. Definer functions are triggers only and stay out. Re-run this file after a migration adds functions.
DO $$
DECLARE
    fn text;
BEGIN
    FOR fn IN SELECT p.oid::regprocedure::text FROM pg_proc p
              WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'core\_%' AND NOT p.prosecdef
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO agent_memory_exporter', fn);
    END LOOP;
END
$$;
-- With the dashboard's own database apart (PG_DASHBOARD, issue 52) the register's counts and the views log's gaps are
-- read there: run these in that database too (until the grants are split per database), with CONNECT on it:
--   GRANT USAGE ON SCHEMA public TO agent_memory_exporter;
--   GRANT SELECT ON core_erasure_register_counts, core_data_view_gaps TO agent_memory_exporter;
--   GRANT SELECT ON core_thread_summary, core_usage_days TO agent_memory_exporter;  -- the extraction's (010)
--   GRANT SELECT ON core_sweep_log TO agent_memory_exporter;  -- the sweep's log (020)
