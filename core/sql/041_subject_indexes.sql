-- Found by the 10M-document run (bench/bench_production.py, BENCHMARKS.md "10M"): the subject resolver's
-- per-customer lookups (core/privacy/subjects.py; Checkpoints page search, erasure, access export) read
-- every row of `checkpoints` there: `metadata ->> 'customer_id' = 'C4'` and the same for `user_id` were
-- Parallel Seq Scans of 1.1M pages (3.5 s and 3.0 s), `thread_id LIKE 'cliente-C4-%'` a full index
-- scan (0.7 s), 8.1 s in all for one customer: linear in the table, where they must be flat.
-- Partial indexes: only the checkpoints that carry the key (cliente_id has its own since 006). A key
-- added to SUBJECT_METADATA_KEYS needs one of the same shape. The LIKE pattern needs text_pattern_ops
-- under a non-C collation (the embedded server is C.UTF-8).
-- Plain CREATE INDEX because migrations run in a transaction: on a large production table create
-- them CONCURRENTLY by hand first (same names); IF NOT EXISTS then skips them here.
CREATE INDEX IF NOT EXISTS core_checkpoints_customer_id_idx ON checkpoints ((metadata ->> 'customer_id'))
    WHERE metadata ? 'customer_id';
CREATE INDEX IF NOT EXISTS core_checkpoints_user_id_idx ON checkpoints ((metadata ->> 'user_id'))
    WHERE metadata ? 'user_id';
CREATE INDEX IF NOT EXISTS core_checkpoints_thread_pattern_idx ON checkpoints (thread_id text_pattern_ops);
