-- One entry's labels and whether it is published (the benchledger page's lineage page);
-- any entry, current or superseded, so a link to an older one still answers.
SELECT e.entry_id, e.run_id, r.sweep_name, e.arm, e.workload, e.load_point, e.metric,
       e.statistic, e.scope, e.numerator, e.value, e.ci95_low, e.ci95_high, e.unit,
       e.n_restarts, e.n_requests, e.evidence, e.publishable, e.blocked_by
FROM entries AS e
LEFT JOIN runs AS r USING (run_id)
WHERE e.entry_id = $entry_id
