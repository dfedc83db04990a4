-- The run's frontier points (warehouse/frontier.py), in load order per arm and workload.
SELECT * EXCLUDE (harness_version, derived_at)
FROM frontier
WHERE run_id = $run_id
ORDER BY arm, workload, concurrency, requested_rate_rps NULLS FIRST
