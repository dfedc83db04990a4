-- Restarts of one run, as the GX gate's "restarts" suite sees them.
SELECT restart_id, arm, status
FROM restarts
WHERE run_id = $run_id
ORDER BY restart_id
