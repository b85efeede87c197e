-- What a sweep deleted (or, in a dry run, would delete) from `store`: the first documents' keys of each run
-- (core/operations/sweep.py, DOCUMENTS_SAMPLE), listed on the Sweeps page with the run's threads (issue 27).
-- A prefix names a customer (`clientes.C9`): an erasure deletes its rows here (our tables with a `prefix` column are
-- found by column, core/privacy/evidence.py).
CREATE TABLE IF NOT EXISTS core_sweep_documents (
    run_id  bigint NOT NULL REFERENCES core_sweep_log (id) ON DELETE CASCADE,
    prefix  text   NOT NULL,
    key     text   NOT NULL,
    PRIMARY KEY (run_id, prefix, key)
);
