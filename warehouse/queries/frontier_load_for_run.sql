-- Per window of one run: its load point (windows from before load points are at
-- 'c' || concurrency), how well its open-loop schedule was kept (the schedule's span over
-- the achieved span of its submissions: 1 kept, below 1 the submissions fell behind, as
-- when every one of `concurrency` slots was busy) and how many requests stayed unresolved.
-- warehouse/frontier.py joins each window's queue growth (benchledger/queue_growth.sql).
SELECT window_id, arm, workload, coalesce(load_point, 'c' || concurrency) AS load_point,
       requested_span_s / nullif(achieved_span_s, 0) AS schedule_kept, unresolved
FROM windows
WHERE run_id = $run_id
