-- Windows of one run, as the GX gate's "windows" suite sees them.
SELECT window_id, restart_id, arm, workload, concurrency, submitted, completed, failed,
       unresolved, drain_status, min_requests
FROM windows
WHERE run_id = $run_id
ORDER BY window_id
