-- One run's comparisons (refuted and undecidable ones included), in a stable order;
-- $limit rows from $offset (the benchledger page's pages; $limit NULL: all).
SELECT *
FROM comparisons
WHERE run_id = $run_id
ORDER BY metric, workload, role DESC, a, b, comparison_id
LIMIT $limit OFFSET $offset
