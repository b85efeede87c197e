-- Replica health, written by every process that runs the dual checkpoint saver
-- (core/checkpointer.py) and read by the SRE's Degradation page (core/replica_health.py).

-- One row per replica, upserted every few seconds while it can reach PostgreSQL. A row whose
-- updated_at is old means the replica stopped publishing (down, or cut off from PostgreSQL).
CREATE TABLE IF NOT EXISTS core_replica_heartbeat (
    replica_id            text PRIMARY KEY,
    host                  text        NOT NULL,
    pid                   integer     NOT NULL,
    state                 text        NOT NULL CHECK (state IN ('healthy', 'degraded', 'stopped')),
    degraded_since        timestamptz,
    buffered_checkpoints  integer     NOT NULL DEFAULT 0,
    buffered_writes       integer     NOT NULL DEFAULT 0,
    last_success          timestamptz,
    started_at            timestamptz NOT NULL DEFAULT now(),
    heartbeat_interval_s  real        NOT NULL DEFAULT 2,
    episodes_total        integer     NOT NULL DEFAULT 0,
    denials_total         integer     NOT NULL DEFAULT 0,
    refusals_total        integer     NOT NULL DEFAULT 0,
    updated_at            timestamptz NOT NULL DEFAULT now()
);

-- One row per degradation episode, written by the replica once it has resynced. The keys make
-- these writes idempotent: a write that outlived its deadline and is retried is not doubled.
CREATE TABLE IF NOT EXISTS core_degradation_episodes (
    id                    bigserial PRIMARY KEY,
    episode_key           uuid        NOT NULL UNIQUE,
    replica_id            text        NOT NULL,
    host                  text        NOT NULL,
    pid                   integer     NOT NULL,
    degraded_from         timestamptz NOT NULL,
    degraded_to           timestamptz NOT NULL,
    reason                text,
    checkpoints_buffered  integer     NOT NULL,
    writes_buffered       integer     NOT NULL,
    ops_resynced          integer     NOT NULL,
    resync_ms             double precision,
    denials               jsonb       NOT NULL DEFAULT '[]',   -- [{tool, risk, thread_id, customer_id, denied_at}]
    recorded_at           timestamptz NOT NULL DEFAULT now(),
    CHECK (degraded_to >= degraded_from)
);
CREATE INDEX IF NOT EXISTS core_degradation_episodes_from_idx ON core_degradation_episodes (degraded_from DESC);
CREATE INDEX IF NOT EXISTS core_degradation_episodes_replica_idx ON core_degradation_episodes (replica_id, degraded_from DESC);

-- Tool calls the fail-closed guard denied (kept in memory during the outage, flushed on recovery).
-- customer_id/thread_id point at a customer: the erasure of that customer must delete these rows.
CREATE TABLE IF NOT EXISTS core_guard_denials (
    id            bigserial PRIMARY KEY,
    denial_key    uuid        NOT NULL UNIQUE,
    episode_id    bigint REFERENCES core_degradation_episodes (id) ON DELETE SET NULL,
    replica_id    text        NOT NULL,
    tool          text        NOT NULL,
    risk          text        NOT NULL CHECK (risk IN ('READ_ONLY', 'LOW', 'HIGH', 'CRITICAL')),
    thread_id     text,
    subject_root  text,
    subject_id    text,
    customer_id   text,
    reason        text,
    denied_at     timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS core_guard_denials_denied_at_idx ON core_guard_denials (denied_at DESC);
CREATE INDEX IF NOT EXISTS core_guard_denials_customer_idx ON core_guard_denials (customer_id) WHERE customer_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS core_guard_denials_thread_idx ON core_guard_denials (thread_id);

-- Checkpoint payloads the allowlisted serializer refused (a type outside the allowlist).
CREATE TABLE IF NOT EXISTS core_serde_refusals (
    id             bigserial PRIMARY KEY,
    refusal_key    uuid        NOT NULL UNIQUE,
    replica_id     text        NOT NULL,
    type_name      text        NOT NULL,   -- module.Class (or module.Class.method)
    kind           text        NOT NULL,   -- msgpack_blocked, msgpack_method_blocked, json_blocked, pickle
    thread_id      text,
    checkpoint_id  text,
    refused_at     timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS core_serde_refusals_refused_at_idx ON core_serde_refusals (refused_at DESC);
CREATE INDEX IF NOT EXISTS core_serde_refusals_thread_idx ON core_serde_refusals (thread_id);
