-- Every run with its sweep, newest first: what `benchledger publish` chooses from when it
-- is given a sweep, a run's folder name, or nothing (publishing/read.py, run_to_publish).
SELECT run_id, sweep_name, started_at
FROM runs
ORDER BY started_at DESC, run_id DESC
