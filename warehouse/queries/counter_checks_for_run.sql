-- How the server's counters checked each window of one run (reconciliations, written by
-- validate): per window, how many of its counters matched, were only a lower bound (failed
-- or unresolved requests), mismatched, or did not exist. Derivation turns these into each
-- entry's counter_check label.
SELECT r.window_id,
       count(*) FILTER (WHERE r.status = 'match') AS matched,
       count(*) FILTER (WHERE r.status = 'lower bound') AS lower_bound,
       count(*) FILTER (WHERE r.status = 'mismatch') AS mismatched,
       count(*) FILTER (WHERE r.status = 'no counter') AS no_counter
FROM reconciliations AS r
WHERE r.run_id = $run_id
GROUP BY r.window_id
ORDER BY r.window_id
