-- Least privilege for the sweep CronJob's database role (`python -m core.operations.sweep_cli`).
-- Run once as the owner of the agents' tables, after `python -m core.migrate`. Replace the role
-- name and password source as your cluster does (e.g. a CloudNativePG managed role).
--
--   store            SELECT (count), UPDATE (SELECT ... FOR UPDATE locks the expired rows), DELETE (sweep_ttl)
--   store_vectors    SELECT (count the vectors removed; the ON DELETE CASCADE itself runs as the table owner)
--   checkpoint_*     SELECT (thread age, re-check), DELETE (PostgresSaver.delete_thread, history pruning)
--   checkpoints      UPDATE (pruning unlinks a kept checkpoint from its deleted parent: parent_checkpoint_id)
--   core_prune_threads  INSERT (the threads a run pruned, migration 060)
--   core_prune_pending_blobs  SELECT, INSERT, DELETE (blobs of pruned checkpoints awaiting their grace, migration 121)
--   core_sweep_documents  INSERT (the keys of the documents a run deleted, migration 061)
--   core_sweep_log   INSERT + UPDATE (its own row), SELECT (RETURNING)
--   core_thread_storage  SELECT, INSERT, DELETE (storage per thread, recomputed every run)
--   core_customer_stores, core_customer_store_sources, core_customer_store_refresh  the customers' stores (migration 150)
--   core_prefix_counts ... core_capture_position  the follower's aggregates, recounted where no slot follows (issue 37)
--   advisory locks   pg_try_advisory_lock / pg_advisory_unlock need no grant
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agent_memory_sweeper') THEN
        CREATE ROLE agent_memory_sweeper LOGIN;
    END IF;
END
$$;
GRANT USAGE ON SCHEMA public TO agent_memory_sweeper;
GRANT SELECT, UPDATE, DELETE ON store TO agent_memory_sweeper;
GRANT SELECT ON store_vectors TO agent_memory_sweeper;
GRANT SELECT, DELETE ON checkpoints, checkpoint_blobs, checkpoint_writes TO agent_memory_sweeper;
GRANT UPDATE (parent_checkpoint_id) ON checkpoints TO agent_memory_sweeper;
GRANT SELECT, INSERT, UPDATE ON core_sweep_log TO agent_memory_sweeper;
-- Where logical decoding is not allowed (no slot follows the database), the sweep recounts the change follower's
-- aggregates from the tables (core/capture/recount.py, issue 37): TRUNCATE and INSERT on them and its position row.
-- With a slot, the follower's role keeps them (deploy/capture-grants.sql) and the sweep leaves them alone.
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE
    ON core_prefix_counts, core_expiry_days, core_value_holders, core_store_shadow, core_root_counts,
       core_checkpoint_shadow
    TO agent_memory_sweeper;
GRANT EXECUTE ON FUNCTION core_metadata_subjects(jsonb) TO agent_memory_sweeper;
GRANT SELECT, INSERT, UPDATE ON core_capture_position TO agent_memory_sweeper;
GRANT USAGE ON SEQUENCE core_sweep_log_id_seq TO agent_memory_sweeper;
-- History pruning (migration 060): the threads each run pruned; the run's totals go in its core_sweep_log row.
GRANT SELECT, INSERT ON core_prune_threads TO agent_memory_sweeper;
-- Blobs of pruned checkpoints wait a grace before a later run deletes them (migration 121, issue 43).
GRANT SELECT, INSERT, DELETE ON core_prune_pending_blobs TO agent_memory_sweeper;
-- The first documents each run deleted or would delete (migration 061), listed on the Sweeps page.
GRANT SELECT, INSERT ON core_sweep_documents TO agent_memory_sweeper;
-- The Checkpoints page's storage summary, recomputed by every sweep (migration 009; DELETE also
-- allows the LOCK TABLE ... IN EXCLUSIVE MODE that keeps two refreshes apart).
GRANT SELECT, INSERT, DELETE ON core_thread_storage TO agent_memory_sweeper;
-- The last refresh's time, keys and row counts (migration 048: the Storage view's totals "as of").
GRANT SELECT, INSERT, UPDATE ON core_thread_storage_refresh TO agent_memory_sweeper;
-- Bytes per channel and thread, growth per step (migration 062) and orphans per thread (090), recomputed with the
-- summary for the threads whose rows changed.
GRANT SELECT, INSERT, DELETE ON core_channel_storage, core_thread_growth, core_thread_orphans TO agent_memory_sweeper;
-- Tool-call extraction step (core/history/tool_calls.py): extracted rows, orphans pruned, watermark.
GRANT SELECT, INSERT, UPDATE, DELETE ON core_tool_calls, core_thread_days, core_refused_payloads TO agent_memory_sweeper;
GRANT SELECT, INSERT, UPDATE ON core_extract_watermark TO agent_memory_sweeper;
-- The same pass keeps the thread search's summary and the token usage with its rollups (migration 080).
GRANT SELECT, INSERT, UPDATE, DELETE ON core_thread_summary, core_message_usage, core_usage_threads, core_usage_days
    TO agent_memory_sweeper;
-- AI messages without usage (migration 120): a thread's usage said partial.
GRANT SELECT, INSERT, DELETE ON core_message_no_usage TO agent_memory_sweeper;
-- Their rollups for the Preferences page (migration 047), kept by statement triggers on those two tables, which run
-- with the privileges of the role that extracts or prunes (TRUNCATE: a TRUNCATE of the base tables empties them).
DO $$
BEGIN
    IF to_regclass('core_tool_call_days') IS NOT NULL THEN
        GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON core_tool_call_days, core_tool_call_subject_days,
            core_tool_call_day_pairs, core_tool_call_thread_days, core_thread_last, core_thread_day_pairs
            TO agent_memory_sweeper;
    END IF;
END
$$;
-- Token index step (core/privacy/token_index.py, migration 042): threads claimed, indexed, un-listed; tokens of
-- deleted threads pruned.
GRANT SELECT, INSERT, UPDATE, DELETE ON core_thread_tokens, core_token_dirty TO agent_memory_sweeper;
-- The attribution coverage as of this sweep (migration 045).
GRANT SELECT, INSERT, UPDATE ON core_coverage_snapshot TO agent_memory_sweeper;
-- Which store each customer belongs to (migration 150, core/memory/customer_stores.py): each source's rows replaced,
-- its status and the refresh's totals. CUSTOMER_STORE_QUERY runs as this role: grant it SELECT on what it reads.
GRANT SELECT, INSERT, UPDATE, DELETE ON core_customer_stores, core_customer_store_sources TO agent_memory_sweeper;
GRANT SELECT, INSERT, UPDATE ON core_customer_store_refresh TO agent_memory_sweeper;

-- Retention of the log of who looked at a customer's data (core/privacy/data_views.py, migration 085): its oldest
-- rows and their chain links deleted, the cut recorded.
GRANT SELECT, DELETE ON core_data_views, core_register_chain TO agent_memory_sweeper;
GRANT SELECT, INSERT ON core_register_cuts TO agent_memory_sweeper;
-- ... with the records of views not recorded (migration 087) older than the same retention.
GRANT SELECT, DELETE ON core_data_view_gaps TO agent_memory_sweeper;

-- The erasure register's re-check, which the job runs after the sweep (core.erasure.recheck_all):
-- it counts a customer's rows again in every table that can name one (store, checkpoints and our
-- core_* logs, found by column), and records the result. Read access to the schema, plus its own rows.
-- Re-run this file after a migration adds tables (GRANT ... ON ALL TABLES covers existing ones only).
GRANT SELECT ON ALL TABLES IN SCHEMA public TO agent_memory_sweeper;
GRANT SELECT, UPDATE ON core_erasure_register TO agent_memory_sweeper;
GRANT SELECT, INSERT ON core_erasure_rechecks TO agent_memory_sweeper;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO agent_memory_sweeper;

-- Physical erasure (core.privacy.physical.settle, migration 137), after the re-check: its own rows, the needles erase()
-- kept (read above); a plain VACUUM of the five agents' tables (PostgreSQL 17+: MAINTAIN, which also allows CLUSTER
-- and REINDEX: grant it only if the job may hold that; without it VACUUM warns and skips, recorded as not done) and a
-- CHECKPOINT (pg_checkpoint, PostgreSQL 15+; only a superuser can grant it: a notice otherwise, and the step is
-- recorded as not permitted). The files are read only where the job can read the server's data directory (the
-- embedded server): elsewhere the register says "not measured", never "overwritten".
GRANT SELECT, INSERT, UPDATE ON core_erasure_physical TO agent_memory_sweeper;
DO $$
BEGIN
    IF current_setting('server_version_num')::int >= 170000 THEN
        EXECUTE 'GRANT MAINTAIN ON store, store_vectors, checkpoints, checkpoint_blobs, checkpoint_writes '
                'TO agent_memory_sweeper';
    END IF;
    BEGIN
        GRANT pg_checkpoint TO agent_memory_sweeper;
    EXCEPTION WHEN insufficient_privilege OR undefined_object THEN
        RAISE NOTICE 'pg_checkpoint not granted (%): the physical erasure step records its CHECKPOINT as not permitted',
            SQLERRM;
    END;
END
$$;

-- Our functions (the SQL decoder of checkpoint payloads, the registers' seals, ...) are not executable by PUBLIC
-- (migration 050): the job calls them directly and through our views. Definer functions are triggers only and stay
-- out. Re-run this file after a migration adds functions.
DO $$
DECLARE
    fn text;
BEGIN
    FOR fn IN SELECT p.oid::regprocedure::text FROM pg_proc p
              WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'core\_%' AND NOT p.prosecdef
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO agent_memory_sweeper', fn);
    END LOOP;
END
$$;
