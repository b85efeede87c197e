-- Physical erasure, measured and dated (issue 42 item 1; core/privacy/physical.py). One row per erasure request, kept
-- up to date by the sweep job until the request is settled: what was done to the agents' tables after the erasure
-- (plain VACUUM, CHECKPOINT: when, and PostgreSQL's dead tuples and last vacuum after it), what a read of the
-- server's files found (per table: the references `t1`, `t2`... of the request's terms, never a value; or "not
-- measured" with the reason), and the three times: SQL zero (the request's finished_at), files overwritten (only when
-- a scan measured no term in any table file), WAL and backup horizon (from the settings, or unknown with the reason).
CREATE TABLE IF NOT EXISTS core_erasure_physical (
    request_id             bigint      PRIMARY KEY REFERENCES core_erasure_register (id),
    t_sql_zero             timestamptz,                       -- when the evidence queries reached zero
    steps                  jsonb       NOT NULL,              -- {tables: {t: {step, started_at, finished_at, done,
                                                              --   error?, stats}}, checkpoint: {...}}
    files                  jsonb       NOT NULL,              -- {status, reason, tables: {t: {found, parts}}, wal}
    files_status           text        NOT NULL
                           CHECK (files_status IN ('overwritten', 'in free space until reused or rewritten',
                                                   'not measured')),
    files_note             text,                              -- why not measured, what is still found
    t_files_overwritten    timestamptz,
    wal                    jsonb       NOT NULL,              -- settings, LSN, oldest segment, slots, verdict
    backup_retention_days  integer,                           -- BACKUP_RETENTION_DAYS as configured (NULL: unset)
    t_wal_backup_horizon   timestamptz,
    horizon_note           text,                              -- how the horizon was computed, or why unknown
    first_steps_at         timestamptz NOT NULL,
    settled_at             timestamptz NOT NULL,              -- the latest sweep that ran the steps and the scan
    attempts               integer     NOT NULL DEFAULT 1,
    -- a value still found is never reported as overwritten
    CONSTRAINT core_erasure_physical_overwritten_measured
        CHECK ((files_status = 'overwritten') = (t_files_overwritten IS NOT NULL))
);

-- What erase() keeps, while it holds the values, so that the sweep can look for them in the files later without them
-- (core.privacy.physical.needles_for): per term reference, its byte length, a 16-bit head and a digest, both keyed
-- with TERM_HASH_KEY (never in the database) and the digest salted with the request's term_salt. No value.
CREATE TABLE IF NOT EXISTS core_erasure_needles (
    request_id bigint      PRIMARY KEY REFERENCES core_erasure_register (id),
    needles    jsonb       NOT NULL,  -- [{ref, bytes, head, digest}]
    erased_lsn pg_lsn,                -- the WAL insert position when the erasure finished: WAL before it may hold the
                                      -- values (their writes, and full-page images of the pages the deletes touched)
    created_at timestamptz NOT NULL DEFAULT now()
);
