-- Entries of one run that did not pass every gate, with the rules that blocked them.
SELECT entry_id, arm, workload, concurrency, metric, value, blocked_by
FROM current_entries
WHERE run_id = $run_id AND NOT publishable
ORDER BY arm, workload, concurrency, metric, entry_id
