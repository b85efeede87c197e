-- The three indexes of ours left on the store's tables go (issue 37: nothing of ours on the agents' write path;
-- each was an extra index entry in every `PostgresStore.put`). What they served:
--
-- core_store_hilo_idx (048, `value ->> 'hilo'` of customers' documents): the attribution coverage and the stores
--   of a customer read the `hilo` back-links by thread. The change follower now keeps each customer's document's
--   link in its own shadow row (core_store_shadow.hilo, indexed here, in our schema), from the new tuple of every
--   INSERT/UPDATE; a DELETE drops the shadow row by key. Filled below from the current rows.
-- core_store_expires_at_prefix_idx (008, expires_at INCLUDE prefix): the expired counts and today's forecast read
--   the store's own partial index on expires_at (langgraph's idx_store_expires_at) and the heap; the per-day
--   figures come from core_expiry_days (follower-kept).
-- core_store_vectors_prefix_pattern_idx (008): the erasure's zero-count query on store_vectors stays the seed's,
--   word for word (the DPO's evidence reads the live table, never our aggregates): a sequential scan of
--   `store_vectors` per evidence round, measured in BENCHMARKS.md ("Change capture").
--
-- A follower of an older release does not write `hilo`: stop it, run the migrations, start the new one
-- (docs/operator.md, "Upgrading").
DROP INDEX IF EXISTS core_store_hilo_idx;
DROP INDEX IF EXISTS core_store_expires_at_prefix_idx;
DROP INDEX IF EXISTS core_store_vectors_prefix_pattern_idx;

ALTER TABLE core_store_shadow ADD COLUMN IF NOT EXISTS hilo text;
CREATE INDEX IF NOT EXISTS core_store_shadow_hilo_idx ON core_store_shadow (hilo) WHERE hilo IS NOT NULL;

INSERT INTO core_store_shadow (prefix, key, hilo)
SELECT prefix, key, value ->> 'hilo' FROM store
WHERE prefix LIKE 'clientes.%' AND jsonb_typeof(value -> 'hilo') = 'string'
ON CONFLICT (prefix, key) DO UPDATE SET hilo = EXCLUDED.hilo;
