-- The variance report of one run, for the decode rate (what users tune restarts for).
SELECT *
FROM variance_report
WHERE run_id = $run_id AND metric = 'decode_rate'
ORDER BY arm, workload, concurrency, load_point, numerator
