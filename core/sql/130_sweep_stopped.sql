-- A run whose process ended before the run did (a pod killed, a dashboard restarted mid-sweep) is closed as
-- 'stopped' with the reason in `error`, by the next sweep or the Sweeps page: a row still 'running' while no process
-- holds the sweep's advisory lock has no process behind it (core/operations/sweep.py, close_dead_runs).
ALTER TABLE core_sweep_log DROP CONSTRAINT IF EXISTS core_sweep_log_status_check;
ALTER TABLE core_sweep_log ADD CONSTRAINT core_sweep_log_status_check
    CHECK (status IN ('running', 'ok', 'dry_run', 'locked', 'error', 'stopped'));
