-- A customer's thread-days (core_thread_days.cliente_id): the erasure's evidence count and deletion find them by
-- this column like every other core_* table's; without an index that read all 1M rows at 10M (116 ms a count).
CREATE INDEX IF NOT EXISTS core_thread_days_cliente_idx ON core_thread_days (cliente_id) WHERE cliente_id IS NOT NULL;
