-- Every window of one run with all its labels (derivation reads these). A window recorded
-- before load points were (issue #27) is at the point of its concurrency.
SELECT * REPLACE (coalesce(load_point, 'c' || concurrency) AS load_point)
FROM windows
WHERE run_id = $run_id
ORDER BY window_id
