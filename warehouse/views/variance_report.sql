-- One row per (run, arm, workload, metric, numerator, scope, load point) of the current mean
-- entries over requests (scope single_stream or per_user): the metric's spread within restarts
-- (mean per-restart CV) next to its spread between restarts (CV of the restart means).
-- When the second is large next to the first, the hardware needs more restarts, not more
-- requests.
CREATE VIEW variance_report AS
SELECT e.run_id, e.arm, e.workload, e.metric, e.numerator, e.scope, e.concurrency,
       coalesce(e.load_point, 'c' || e.concurrency) AS load_point,
       count(*)                              AS n_restarts,
       sum(m.n_requests)                     AS n_requests,
       avg(m.sd / nullif(m.mean, 0))         AS cv_within_restarts,
       stddev_samp(m.mean) / nullif(avg(m.mean), 0) AS cv_between_restarts
FROM current_entries AS e
JOIN entry_restart_means AS m USING (entry_id)
WHERE e.statistic = 'mean' AND e.scope IN ('single_stream', 'per_user')
GROUP BY ALL;
