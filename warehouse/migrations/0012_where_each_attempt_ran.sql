-- Issue #12: where each restart and window actually ran, beside where it was asked to, and
-- the measure attempts that were cut off. Raw files written before this carry none of it:
-- their rows keep NULL (not recorded).

-- The arm's `node` setting (its Airflow queue; "local" = the default queue). `node` stays
-- the measuring machine's own hostname.
ALTER TABLE restarts ADD COLUMN requested_node VARCHAR;
-- The worker that launched the server, as its Airflow task instance records it.
ALTER TABLE restarts ADD COLUMN worker_hostname VARCHAR;
-- Measure attempts that started a window and left no files for it (a killed worker, a
-- failed step): [{window_id, attempt, started_at, worker_hostname, noticed_by}]; their
-- in-flight requests are lost, and this says so. [] when there were none.
ALTER TABLE restarts ADD COLUMN interrupted_windows JSON;

-- The Airflow try number of the measure task that measured the window (each window is
-- measured once, by the attempt that completed it) and the worker it ran on.
ALTER TABLE windows ADD COLUMN attempt INTEGER;
ALTER TABLE windows ADD COLUMN worker_hostname VARCHAR;
