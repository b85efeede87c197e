-- The sweep's per-thread storage refresh and attribution coverage in bounded temp space (issue 14).
-- At 10M checkpoint writes the single GROUP BY thread_id over the three checkpoint tables needed more than
-- 3 GB of temp space (failed under temp_file_limit=3GB) and the coverage aggregate filled the disk. Both now
-- run in batches of thread_id key ranges (core/checkpoints/views.py, core/privacy/subjects.py), and the
-- coverage is computed from core_thread_storage right after its refresh, so the sweep reads the three tables
-- once.
--
-- metadata_keys: which of the configured subject metadata keys (SUBJECT_METADATA_KEYS at the refresh) the
-- thread's checkpoints carry (`metadata ? key` on any of them): the coverage's "tagged" without reading
-- `checkpoints` again.
ALTER TABLE core_thread_storage ADD COLUMN IF NOT EXISTS metadata_keys text[] NOT NULL DEFAULT '{}';

-- One row: the last refresh (same transaction as the rows of core_thread_storage, same computed_at), the keys
-- it checked, and the three tables' exact row counts at its snapshot (the Storage view's totals, "as of").
-- Counts only: nothing here names a customer or a thread.
CREATE TABLE IF NOT EXISTS core_thread_storage_refresh (
    singleton      boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    computed_at    timestamptz NOT NULL DEFAULT now(),
    metadata_keys  text[]      NOT NULL,
    threads        bigint      NOT NULL,
    checkpoints    bigint      NOT NULL,
    blobs          bigint      NOT NULL,
    writes         bigint      NOT NULL,
    batches        integer     NOT NULL,
    batch_rows     integer     NOT NULL,
    seconds        double precision NOT NULL
);

-- The coverage reads the customers' `hilo` back-links one thread_id range at a time: a partial index on the
-- link (only documents under `clientes.` that carry a string `hilo`, the article's preference documents), so
-- a batch reads its range of links instead of every customer document. Same predicate, word for word, as the
-- queries in core/privacy/subjects.py (a partial index is used only when the query implies it).
-- Plain CREATE INDEX because migrations run in a transaction: on a large production `store` create it
-- CONCURRENTLY by hand first (same name); IF NOT EXISTS then skips it here.
CREATE INDEX IF NOT EXISTS core_store_hilo_idx ON store ((value ->> 'hilo'))
    WHERE prefix LIKE 'clientes.%' AND jsonb_typeof(value -> 'hilo') = 'string';
