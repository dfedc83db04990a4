-- Every window of one run with all its labels (derivation reads these).
SELECT *
FROM windows
WHERE run_id = $run_id
ORDER BY window_id
