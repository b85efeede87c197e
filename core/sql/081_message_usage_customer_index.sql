-- The erasure's zero-count evidence on core_message_usage (080) asks for the customer's threads OR its cliente_id:
-- an index on cliente_id lets it stay an index lookup as the table grows (tests/test_attribution.py checks every
-- evidence query with sequential scans disabled).
CREATE INDEX IF NOT EXISTS core_message_usage_cliente_idx ON core_message_usage (cliente_id) WHERE cliente_id IS NOT NULL;
