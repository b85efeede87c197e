-- The erasure register: one row per request to erase a customer (core/erasure.py). It is the
-- DPO's proof, so erasure never deletes from it: it keeps who asked, when it reached zero, the
-- counts before and after per table, and the literal zero-count queries with their results.
CREATE TABLE IF NOT EXISTS core_erasure_register (
    id               bigserial PRIMARY KEY,
    customer_id      text        NOT NULL,
    namespace_prefix text        NOT NULL,             -- e.g. clientes.C9 (nested namespaces below it too)
    operator         text        NOT NULL,             -- signed-in e-mail, "local", "demo", ...
    requested_at     timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    status           text        NOT NULL DEFAULT 'running'
                     CHECK (status IN ('running', 'complete', 'incomplete', 'failed')),
    passes           integer     NOT NULL DEFAULT 0,   -- rounds until zero (live writes add rounds)
    thread_ids       text[]      NOT NULL DEFAULT '{}',-- the customer's threads: a re-check looks for them again
    counts_before    jsonb       NOT NULL DEFAULT '{}',-- {table: rows} before the first delete
    deleted          jsonb       NOT NULL DEFAULT '{}',-- {table: rows deleted}, over every pass
    counts_after     jsonb,                            -- {table: rows} by the final evidence queries
    evidence         jsonb,                            -- [{table, sql, result, at}] literal SQL as run
    report           text,                             -- why not complete, in words
    last_recheck_at    timestamptz,
    last_recheck_clean boolean
);
CREATE INDEX IF NOT EXISTS core_erasure_register_customer_idx ON core_erasure_register (customer_id, requested_at);
CREATE INDEX IF NOT EXISTS core_erasure_register_requested_idx ON core_erasure_register (requested_at);

-- Every re-check of a request (manual button or the sweep job): data that came back after the
-- erasure (e.g. a late checkpoint write recreating a deleted thread) is recorded here.
CREATE TABLE IF NOT EXISTS core_erasure_rechecks (
    id          bigserial PRIMARY KEY,
    request_id  bigint      NOT NULL REFERENCES core_erasure_register (id),
    checked_at  timestamptz NOT NULL DEFAULT now(),
    trigger     text        NOT NULL,                  -- manual / sweep
    operator    text,
    clean       boolean     NOT NULL,
    counts      jsonb       NOT NULL,                  -- {table: rows found}
    evidence    jsonb       NOT NULL                   -- [{table, sql, result, at}]
);
CREATE INDEX IF NOT EXISTS core_erasure_rechecks_request_idx ON core_erasure_rechecks (request_id, checked_at);
