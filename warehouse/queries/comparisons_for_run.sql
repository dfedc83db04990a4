-- One run's comparisons (refuted and undecidable ones included), in a stable order.
SELECT *
FROM comparisons
WHERE run_id = $run_id
ORDER BY metric, workload, role DESC, a, b, comparison_id
