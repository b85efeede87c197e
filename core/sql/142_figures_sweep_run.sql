-- One "last sweep" on every page (issue 40 item 4). The sweep job keeps the storage summary and the attribution
-- coverage; the pages said "as of" with the time each was computed (the database's clock) while the Sweeps page
-- names the run (its logged start, which the demo replays on a past day): two different "last sweeps". Each kept
-- figure now records the sweep run that computed it (NULL: computed outside a sweep, e.g. by a page on an empty
-- summary), and the pages name that run by its id and logged start. No foreign key: the sweep log is ours and kept,
-- but a figure must survive a log row's removal.
ALTER TABLE core_thread_storage_refresh ADD COLUMN IF NOT EXISTS sweep_run_id bigint;
ALTER TABLE core_coverage_snapshot ADD COLUMN IF NOT EXISTS sweep_run_id bigint;
