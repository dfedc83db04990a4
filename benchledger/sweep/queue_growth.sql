-- How the wait for the first token grew over each window (issue #27): the mean over the
-- last third of its measured requests, in submission order, over the first third's, and
-- the difference in seconds. A queue grows when the server takes requests slower than they
-- come. The one definition, run by the warehouse (warehouse/frontier.py) and by a
-- searching restart (benchledger/restart/rate_search.py) over `slo_requests` (slo_judge.sql's
-- header names its columns). A request without a first token (failed, unresolved) is not
-- in either mean: unresolved requests are a saturation sign of their own.
WITH thirds AS (
    SELECT window_id,
           ntile(3) OVER (PARTITION BY window_id ORDER BY t_submit_ns) AS third,
           (least(t_first_ns, t_first_reasoning_ns) - t_submit_ns) / 1e9 AS wait_s
    FROM slo_requests
)
SELECT window_id,
       avg(wait_s) FILTER (WHERE third = 3)
           / nullif(avg(wait_s) FILTER (WHERE third = 1), 0) AS queue_growth,
       avg(wait_s) FILTER (WHERE third = 3) - avg(wait_s) FILTER (WHERE third = 1)
           AS queue_growth_s
FROM thirds
GROUP BY window_id
