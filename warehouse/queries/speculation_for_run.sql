-- Each window of one run with the speculation its evidence shows (the view
-- window_speculation: 'observed: counters', 'observed: chunks', NULL: not observed), for
-- the entries' speculation_source (warehouse/derive.py).
SELECT window_id, speculation_observed
FROM window_speculation
WHERE run_id = $run_id
ORDER BY window_id
