-- The published (validated-only) entries of one run, in a stable order for exports; a
-- page of them for the benchledger page ($limit rows from $offset; $limit NULL: all).
SELECT *
FROM published_entries
WHERE run_id = $run_id
ORDER BY arm, workload, concurrency, metric, scope, statistic, entry_id
LIMIT $limit OFFSET $offset
