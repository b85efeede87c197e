-- The erasure's evidence counts core_thread_storage's rows naming the customer (`thread_id = ANY(...) OR
-- cliente_id = id`, core/privacy/evidence.py): without an index on cliente_id that is a scan of one row per
-- thread, 145-160 ms at 1M threads, run twice per erasure (before and after). Plain CREATE INDEX because
-- migrations run in a transaction (a one-row-per-thread table: seconds at 1M threads).
CREATE INDEX IF NOT EXISTS core_thread_storage_cliente_idx ON core_thread_storage (cliente_id)
    WHERE cliente_id IS NOT NULL;

-- The same query on core_guard_denials names the subject as (subject_root, subject_id): one row per denied
-- tool call while degraded, so it grows with outages and traffic; its customer_id and thread_id are indexed
-- since 003, the subject pair was not.
CREATE INDEX IF NOT EXISTS core_guard_denials_subject_idx ON core_guard_denials (subject_root, subject_id)
    WHERE subject_id IS NOT NULL;
