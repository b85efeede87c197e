-- Views of customer data the dashboard could not record (issue 31): logging a view never blocks a page. Each
-- dashboard process queues its views (bounded) and a background thread writes them in batches
-- (core/privacy/data_views.py); while the database does not take them they wait in the queue and are written when
-- it does, with the time they were viewed. Views that overflowed the queue, or were still queued when the process
-- exited, are not in core_data_views: the process counts them and, at its next successful write, records the count
-- here, in the same transaction as that write. The DPO sees the total on Registro de accesos ("N views were not
-- recorded since ..."), the exporter as `agent_memory_data_views_unrecorded`. A process that exits while the
-- database is down cannot record its count here: it logs it (ERROR) instead.
CREATE TABLE IF NOT EXISTS core_data_view_gaps (
    id          bigserial   PRIMARY KEY,
    views       bigint      NOT NULL CHECK (views > 0),   -- views not recorded
    since       timestamptz NOT NULL,                     -- the first of them was viewed at
    until       timestamptz NOT NULL CHECK (until >= since),
    process     text        NOT NULL,                     -- host:pid of the dashboard that lost them
    reason      text        NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS core_data_view_gaps_until_idx ON core_data_view_gaps (until);
