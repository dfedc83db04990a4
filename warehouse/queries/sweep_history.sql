-- The headline entries of every run of one sweep (scheduled and manual, oldest first),
-- each the current derivation of its key: what `benchledger history`, the report's
-- history section, the UI page and the regression gate read (warehouse/history.py).
-- Headline: the per-user decode rate (mean), aggregate output throughput (mean), TTFT p50
-- and p90, goodput (req/s and tok/s) and energy per token. Blocked entries are rows too
-- (publishable false): a line shows the run it could not judge, never skips it silently.
-- $metrics: an empty list means every headline metric.
SELECT r.run_id, r.started_at, r.scheduled_for, r.sweep_sha256, r.harness_version,
       e.entry_id, e.arm, e.workload, e.metric, e.scope, e.statistic, e.numerator, e.unit,
       coalesce(e.load_point, 'c' || e.concurrency) AS load_point, e.concurrency,
       e.requested_rate_rps, e.population, e.publishable, e.blocked_by,
       e.restart_mean, e.restart_ci95_low, e.restart_ci95_high, e.n_restarts,
       e.server_version, e.effective_config_sha256
FROM runs r
JOIN current_entries e USING (run_id)
WHERE r.sweep_name = $sweep
  AND coalesce(r.evidence, 'rerun') = 'rerun' AND e.evidence = 'rerun'
  AND ((e.metric = 'decode_rate' AND e.statistic = 'mean' AND e.scope <> 'aggregate')
    OR (e.metric = 'throughput' AND e.statistic = 'mean' AND e.numerator = 'output_tokens')
    OR (e.metric = 'ttft' AND e.statistic IN ('p50', 'p90'))
    OR (e.metric IN ('goodput', 'energy_per_token') AND e.statistic = 'mean'))
  AND (len($metrics) = 0 OR list_contains($metrics, e.metric))
ORDER BY coalesce(r.scheduled_for, r.started_at), r.started_at, r.run_id, e.arm, e.workload,
         e.metric, e.statistic, e.scope, e.numerator, e.concurrency, load_point;
