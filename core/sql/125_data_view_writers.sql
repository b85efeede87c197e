-- Views lost by a dashboard process killed without a clean exit (issue 43 finding 4). A process's views wait in its
-- memory until written (core/privacy/data_views.py); a SIGKILL (an OOM kill, a node lost) loses them with their
-- count. So each process that records views keeps a marker row here while it runs: written when its recorder
-- starts, its `flushed_through` moved on with each batch written (and its heartbeat refreshed every minute even when
-- idle), deleted at a clean exit with nothing lost. The next recorder to start (any process) turns the marker of a
-- process that is gone (same host and its pid not alive, or no heartbeat for longer than the bound) into a gap below
-- with `views` NULL: an unknown number of views lost by host:pid between `flushed_through` and the time it was found.
CREATE TABLE IF NOT EXISTS core_data_view_writers (
    process         text        PRIMARY KEY,        -- host:pid
    host            text        NOT NULL,
    pid             integer     NOT NULL,
    started_at      timestamptz NOT NULL,
    flushed_through timestamptz NOT NULL,           -- every view of this process viewed before it is written
    heartbeat_at    timestamptz NOT NULL DEFAULT now()
);

-- NULL: an unknown number (the process that held them was killed).
ALTER TABLE core_data_view_gaps ALTER COLUMN views DROP NOT NULL;
