-- The ruler's own error per window of one run (T17): how many client workers measured it,
-- how late they were to stamp events (client lag, ms; NULL: not measured), how busy their
-- cores were, how many content events shared a read, how many completed measured requests
-- arrived in a burst (the requests view's rate_withheld), and what client_lag_within_bound
-- ($rule, bound by the caller: a rule's name is written once, in the catalogue) expected
-- and found there, latest result.
WITH bursts AS (
    SELECT r.window_id, count(*) AS completed_measured,
           count(r.rate_withheld) AS burst_requests
    FROM requests AS r
    WHERE r.window_id IN (SELECT window_id FROM windows WHERE run_id = $run_id)
      AND NOT r.is_warmup AND r.status = 'completed'
    GROUP BY r.window_id
), verdict AS (
    SELECT subject AS window_id, success, expected, found
    FROM validations
    WHERE run_id = $run_id AND expectation = $rule
    QUALIFY row_number() OVER (PARTITION BY subject
                               ORDER BY validated_at DESC, validation_id) = 1
)
SELECT w.window_id, w.arm, w.workload, w.concurrency, rs.restart_index,
       w.client_workers, w.client_lag_p50_ms, w.client_lag_p99_ms, w.client_lag_max_ms,
       w.client_cpu_share, w.bunched_event_fraction,
       coalesce(b.completed_measured, 0) AS completed_measured,
       coalesce(b.burst_requests, 0) AS burst_requests,
       v.success AS lag_within_bound, v.expected AS lag_bound
FROM windows AS w
LEFT JOIN restarts AS rs USING (restart_id)
LEFT JOIN bursts AS b USING (window_id)
LEFT JOIN verdict AS v USING (window_id)
WHERE w.run_id = $run_id
ORDER BY w.arm, w.workload, w.concurrency, rs.restart_index, w.window_id
