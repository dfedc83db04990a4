-- The ruler's own error per window of one run (T17): how many client workers measured it,
-- how late they were to stamp events (client lag, ms; NULL: not measured), how busy their
-- cores were, how many content events shared a read, how many completed measured requests
-- arrived in a burst (view window_bursts), and what client_lag_within_bound ($rule, bound by
-- the caller: a rule's name is written once, in the catalogue) expected there, latest result;
-- and whether a published entry rests on it (the report shows only those windows).
WITH verdict AS (
    SELECT subject AS window_id, success, expected, found
    FROM validations
    WHERE run_id = $run_id AND expectation = $rule
    QUALIFY row_number() OVER (PARTITION BY subject
                               ORDER BY validated_at DESC, validation_id) = 1
)
SELECT w.window_id, w.arm, w.workload, w.concurrency, rs.restart_index,
       w.client_workers, w.client_lag_p50_ms, w.client_lag_p99_ms, w.client_lag_max_ms,
       w.client_cpu_share, w.bunched_event_fraction,
       b.completed_measured, b.burst_requests,
       v.success AS lag_within_bound, v.expected AS lag_bound,
       w.window_id IN (SELECT l.window_id FROM entry_lineage AS l
                       JOIN published_entries AS p USING (entry_id)
                       WHERE p.run_id = $run_id) AS backs_published
FROM windows AS w
LEFT JOIN restarts AS rs USING (restart_id)
LEFT JOIN (SELECT * FROM window_bursts WHERE run_id = $run_id) AS b USING (window_id)
LEFT JOIN verdict AS v USING (window_id)
WHERE w.run_id = $run_id
ORDER BY w.arm, w.workload, w.concurrency, rs.restart_index, w.window_id
