-- The published (validated-only) entries of one run, in a stable order for exports.
SELECT *
FROM published_entries
WHERE run_id = $run_id
ORDER BY arm, workload, concurrency, metric, scope, statistic, entry_id
