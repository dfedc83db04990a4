-- Per-restart summaries of one run's entries (the unit of replication for comparisons).
SELECT m.entry_id, m.restart_id, m.n_requests, m.mean, m.sd
FROM entry_restart_means AS m
JOIN current_entries AS e USING (entry_id)
WHERE e.run_id = $run_id
ORDER BY m.entry_id, m.restart_id
