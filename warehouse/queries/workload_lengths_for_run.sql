-- Per workload of one run: the lengths asked for against those delivered, over the measured
-- requests of the windows a published entry rests on (the report shows nothing of the
-- others). input: requested_input_tokens (synthetic and trace workloads; NULL for prompt
-- sets) against the prompt tokens the server counted; output: max_tokens (a target, T13)
-- against the output tokens delivered. One row per workload, length and side; `missing`
-- counts requests without the number (not asked, or no usage).
WITH shown AS (
    SELECT DISTINCT l.window_id
    FROM entry_lineage AS l
    JOIN published_entries AS p USING (entry_id)
    WHERE p.run_id = $run_id AND l.window_id IS NOT NULL
), measured AS (
    SELECT w.workload, r.requested_input_tokens, r.prompt_tokens, r.max_tokens,
           r.output_tokens
    FROM windows AS w
    JOIN shown USING (window_id)
    JOIN request_records AS r ON r.window_id = w.window_id
    WHERE w.run_id = $run_id AND NOT r.is_warmup
), sides AS (
    SELECT workload, 'input' AS length, 'requested' AS side, requested_input_tokens AS tokens
    FROM measured
    UNION ALL
    SELECT workload, 'input', 'delivered', prompt_tokens FROM measured
    UNION ALL
    SELECT workload, 'output', 'requested', max_tokens FROM measured
    UNION ALL
    SELECT workload, 'output', 'delivered', output_tokens FROM measured
)
SELECT workload, length, side, count(tokens) AS requests, count(*) - count(tokens) AS missing,
       min(tokens) AS min, quantile_cont(tokens, 0.5) AS p50,
       quantile_cont(tokens, 0.9) AS p90, max(tokens) AS max, avg(tokens) AS mean
FROM sides
GROUP BY ALL
ORDER BY workload, length, side DESC
