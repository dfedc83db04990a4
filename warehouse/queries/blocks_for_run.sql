-- Why each blocked entry of one run is blocked: one row per entry, failed rule and the
-- subject it failed on (entry_blocks). Entries derived before entry_blocks existed have
-- no rows there; they show rule NULL and keep their reasons in entries.blocked_by.
-- $limit rows from $offset (the benchledger page's pages; $limit NULL: all).
SELECT e.entry_id, e.arm, e.workload, e.concurrency, e.metric, e.statistic,
       b.rule, b.subject, b.expected, b.found, e.blocked_by
FROM current_entries AS e
LEFT JOIN entry_blocks AS b USING (entry_id)
WHERE e.run_id = $run_id AND NOT e.publishable
ORDER BY b.rule, e.arm, e.workload, e.concurrency, e.metric, e.entry_id, b.subject
LIMIT $limit OFFSET $offset
