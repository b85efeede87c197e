-- Indexes found by the production-scale benchmark (bench/bench_production.py, BENCHMARKS.md
-- "Production-scale run"), each checked with EXPLAIN (ANALYZE, BUFFERS) at 1M documents.
-- Plain CREATE INDEX because migrations run in a transaction: on a large production table create
-- them CONCURRENTLY by hand first (same names); IF NOT EXISTS then skips them here.

-- Sweeps page, expiration forecast (core/sweep.py SELECT_FORECAST) and the expired counts per root
-- (SELECT_EXPIRED_BY_ROOT, core/metrics.py SELECT_BY_ROOT): they need expires_at and the prefix's
-- root of ~80% of `store`. The store's own index on expires_at has no prefix, so the forecast read
-- the whole heap (Seq Scan, 21k pages, 392 ms at 1M); with the prefix included it is an index-only
-- scan (4.7k pages, 192 ms).
CREATE INDEX IF NOT EXISTS core_store_expires_at_prefix_idx ON store (expires_at) INCLUDE (prefix);

-- Erasure evidence on store_vectors: `prefix = $1 OR prefix LIKE 'clientes.<id>.%'`. Its primary key
-- (prefix, key, field_name) cannot serve LIKE under a non-C collation (the embedded server is
-- C.UTF-8), so every preview, erasure pass and re-check scanned every vector (13 ms at 105k vectors,
-- linear in them).
CREATE INDEX IF NOT EXISTS core_store_vectors_prefix_pattern_idx ON store_vectors (prefix text_pattern_ops, key);

-- Same evidence query on core_prefix_counts (one row per namespace: 317k at 1M documents; a
-- Parallel Seq Scan of 17 ms per evidence round).
CREATE INDEX IF NOT EXISTS core_prefix_counts_prefix_pattern_idx ON core_prefix_counts (prefix text_pattern_ops);
