-- The run's frontier comparisons, per role, workload and load point.
SELECT * EXCLUDE (harness_version, derived_at)
FROM frontier_findings
WHERE run_id = $run_id
ORDER BY role DESC, a, b, workload, load_point
