-- The erasure's independent proof (issue 51; core/privacy/proof.py): before a request is recorded `complete`, the
-- customer's id and distinctive values are read again in every table that can hold them, without the token index or
-- the follower's aggregates. One row per request that reached that step: which relations were read, where a value was
-- still found (table and thread, prefix/key or `rows`; terms by their register reference, never by value) and the
-- threads no configured key opens. A request whose proof is not clean is recorded `incomplete`.
CREATE TABLE IF NOT EXISTS core_erasure_proofs (
    request_id  bigint      PRIMARY KEY REFERENCES core_erasure_register (id) ON DELETE CASCADE,
    tables      text[]      NOT NULL,
    found       jsonb       NOT NULL DEFAULT '[]',
    unproven    text[]      NOT NULL DEFAULT '{}',
    clean       boolean     NOT NULL,
    ran_ms      integer     NOT NULL,
    proved_at   timestamptz NOT NULL DEFAULT now()
);
