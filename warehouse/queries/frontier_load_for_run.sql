-- Per (arm, workload, load point) of one run, over its windows: how well the open-loop
-- schedule was kept (the schedule's span over the achieved span of submissions: 1 kept,
-- below 1 the submissions fell behind, as when every one of `concurrency` slots was busy),
-- how the wait for the first token grew over each window (the mean over the last third of
-- its measured requests by submission over the first third's: a queue that grows when the
-- server takes requests slower than they come), and how many stayed unresolved. Windows
-- from before load points are at 'c' || concurrency.
WITH thirds AS (
    SELECT r.window_id,
           ntile(3) OVER (PARTITION BY r.window_id ORDER BY r.t_submit_ns) AS third,
           (least(r.t_first_ns, r.t_first_reasoning_ns) - r.t_submit_ns) / 1e9 AS wait_s
    FROM request_records AS r
    JOIN windows AS w ON w.window_id = r.window_id
    WHERE w.run_id = $run_id AND NOT r.is_warmup
), growth AS (
    SELECT window_id,
           avg(wait_s) FILTER (WHERE third = 3) / nullif(avg(wait_s) FILTER (WHERE third = 1), 0)
               AS queue_growth,
           avg(wait_s) FILTER (WHERE third = 3) - avg(wait_s) FILTER (WHERE third = 1)
               AS queue_growth_s
    FROM thirds
    GROUP BY window_id
)
SELECT w.arm, w.workload, coalesce(w.load_point, 'c' || w.concurrency) AS load_point,
       avg(w.requested_span_s / nullif(w.achieved_span_s, 0)) AS schedule_kept,
       -- the window whose wait grew most (by ratio), with its growth in seconds
       arg_max(g.queue_growth, g.queue_growth) AS queue_growth,
       arg_max(g.queue_growth_s, g.queue_growth) AS queue_growth_s,
       sum(w.unresolved) AS unresolved
FROM windows AS w
LEFT JOIN growth AS g ON g.window_id = w.window_id
WHERE w.run_id = $run_id
GROUP BY ALL
