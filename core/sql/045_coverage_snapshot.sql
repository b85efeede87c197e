-- The attribution coverage (core/privacy/subjects.py) as of the last sweep: the live aggregate reads the three
-- checkpoint tables and every customer document (tens of seconds at 10M), too slow for the Erasure and
-- Checkpoints pages. One row per configuration (metadata keys, thread patterns) it was computed with; a page
-- whose configuration has no row computes it live. Counts only: nothing here names a customer.
CREATE TABLE IF NOT EXISTS core_coverage_snapshot (
    config                jsonb       PRIMARY KEY,
    threads               bigint      NOT NULL,
    unattributed_threads  bigint      NOT NULL,
    bytes                 bigint      NOT NULL,
    unattributed_bytes    bigint      NOT NULL,
    computed_at           timestamptz NOT NULL DEFAULT now()
);
