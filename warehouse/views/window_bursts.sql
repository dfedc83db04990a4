-- One row per window: how many of its completed measured requests arrived in a burst (T17:
-- their tokens after the first came at once, so the requests view withholds their decode
-- rate, TPOT and ITL and says why in rate_withheld), of how many.
CREATE VIEW window_bursts AS
SELECT w.run_id, w.window_id, w.arm, w.workload, w.concurrency,
       count(r.request_id) AS completed_measured,
       count(r.rate_withheld) AS burst_requests
FROM windows AS w
LEFT JOIN requests AS r
       ON r.window_id = w.window_id AND NOT r.is_warmup AND r.status = 'completed'
GROUP BY w.run_id, w.window_id, w.arm, w.workload, w.concurrency
