-- Windows of one run, as the GX gate's "windows" suite sees them, with each counter's
-- reconciliation (NULL error = not reconciled: no counter, or no scrape), joined by the
-- quantity it checks: each server family names its counters differently.
SELECT w.window_id, w.restart_id, w.arm, w.workload, w.concurrency, w.submitted,
       w.completed, w.failed, w.unresolved, w.drain_status, w.min_requests,
       w.reconcile_tolerance, w.token_count, w.calibration_rel_error,
       w.calibration_detail,
       g.relative_error AS generation_error, g.detail AS generation_detail,
       p.relative_error AS prompt_error,     p.detail AS prompt_detail,
       s.relative_error AS success_error,    s.detail AS success_detail
FROM windows AS w
LEFT JOIN reconciliations AS g
       ON g.window_id = w.window_id AND g.quantity = 'generation_tokens'
LEFT JOIN reconciliations AS p
       ON p.window_id = w.window_id AND p.quantity = 'prompt_tokens'
LEFT JOIN reconciliations AS s
       ON s.window_id = w.window_id AND s.quantity = 'finished_requests'
WHERE w.run_id = $run_id
ORDER BY w.window_id
