-- Repair of databases migrated with the first text of 003_replica_health.sql (issue 24): 003 was edited in
-- place to add the idempotency keys (episode_key, denial_key, refusal_key), and a database that had applied
-- it before never got them, so every write of the dual saver failed there (`column "denial_key" does not
-- exist`). The columns as 003 declares them now; rows written before get a key of their own. A database
-- migrated with today's 003 has them already: nothing changes there.
ALTER TABLE core_degradation_episodes ADD COLUMN IF NOT EXISTS episode_key uuid NOT NULL UNIQUE DEFAULT gen_random_uuid();
ALTER TABLE core_degradation_episodes ALTER COLUMN episode_key DROP DEFAULT;

ALTER TABLE core_guard_denials ADD COLUMN IF NOT EXISTS denial_key uuid NOT NULL UNIQUE DEFAULT gen_random_uuid();
ALTER TABLE core_guard_denials ALTER COLUMN denial_key DROP DEFAULT;

ALTER TABLE core_serde_refusals ADD COLUMN IF NOT EXISTS refusal_key uuid NOT NULL UNIQUE DEFAULT gen_random_uuid();
ALTER TABLE core_serde_refusals ALTER COLUMN refusal_key DROP DEFAULT;
