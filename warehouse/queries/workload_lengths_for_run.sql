-- Per workload of one run: the lengths asked for against those delivered, over the measured
-- requests of the windows a published entry rests on (the report shows nothing of the
-- others). input: requested_input_tokens (synthetic and trace workloads; NULL for prompt
-- sets) against the prompt tokens the server counted; output: max_tokens (a target, T13)
-- against the output tokens delivered.
--
-- Two kinds of rows from one pass over the requests (`sides` is materialised once):
-- `bin` NULL: one row per workload, length and side with count, `missing` (requests
-- without the number: not asked, or no usage), min, p50, p90, max, mean;
-- `bin` 0..: the histogram, at most $bins equal bins of whole tokens per workload and
-- length over the range both sides share (so requested and delivered draw on one axis),
-- counted here, never request by request in Python.
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
), sides AS MATERIALIZED (
    SELECT workload, 'input' AS length, 'requested' AS side, requested_input_tokens AS tokens
    FROM measured
    UNION ALL
    SELECT workload, 'input', 'delivered', prompt_tokens FROM measured
    UNION ALL
    SELECT workload, 'output', 'requested', max_tokens FROM measured
    UNION ALL
    SELECT workload, 'output', 'delivered', output_tokens FROM measured
), summary AS (
    SELECT workload, length, side, NULL::INTEGER AS bin,
           count(tokens) AS requests, count(*) - count(tokens) AS missing,
           min(tokens) AS min, quantile_cont(tokens, 0.5) AS p50,
           quantile_cont(tokens, 0.9) AS p90, max(tokens) AS max, avg(tokens) AS mean
    FROM sides
    GROUP BY ALL
), ranges AS (
    -- whole tokens wide, one at least: a workload whose requests all ask for one length
    -- has one bin
    SELECT workload, length, min(tokens) AS low,
           greatest(ceil((max(tokens) - min(tokens) + 1) / $bins), 1) AS width
    FROM sides
    WHERE tokens IS NOT NULL
    GROUP BY ALL
), binned AS (
    SELECT s.workload, s.length, s.side,
           floor((s.tokens - r.low) / r.width)::INTEGER AS bin, r.low, r.width
    FROM sides AS s
    JOIN ranges AS r USING (workload, length)
    WHERE s.tokens IS NOT NULL
), histogram AS (
    SELECT workload, length, side, bin, low + bin * width AS bin_low,
           low + (bin + 1) * width AS bin_high, count(*) AS requests
    FROM binned
    GROUP BY ALL
)
SELECT * FROM summary
UNION ALL BY NAME
SELECT * FROM histogram
ORDER BY workload, length, side DESC, bin NULLS FIRST
