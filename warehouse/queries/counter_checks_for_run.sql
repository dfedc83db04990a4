-- How the server's counters checked each window of one run (reconciliations, written by
-- validate): per window, how many of its counters matched, were only a lower bound (failed
-- or unresolved requests), mismatched, did not exist, or could not be read (its /metrics
-- timed out, answered an error, or not Prometheus text). Derivation turns these into each
-- entry's counter_check label.
SELECT r.window_id,
       count(*) FILTER (WHERE r.status = 'match') AS matched,
       count(*) FILTER (WHERE r.status = 'lower bound') AS lower_bound,
       count(*) FILTER (WHERE r.status = 'mismatch') AS mismatched,
       count(*) FILTER (WHERE r.status = 'no counter') AS no_counter,
       count(*) FILTER (WHERE r.status = 'counter unreadable') AS unreadable
FROM reconciliations AS r
WHERE r.run_id = $run_id
GROUP BY r.window_id
ORDER BY r.window_id
