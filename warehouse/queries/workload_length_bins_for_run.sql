-- The histograms of workload_lengths_for_run.sql: per workload and length, at most $bins
-- equal bins of whole tokens over the range both sides share (so requested and delivered
-- draw on one axis), counted here, never request by request in Python.
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
           floor((s.tokens - r.low) / r.width)::INTEGER AS bin,
           r.low, r.width
    FROM sides AS s
    JOIN ranges AS r USING (workload, length)
    WHERE s.tokens IS NOT NULL
)
SELECT workload, length, side, bin, low + bin * width AS bin_low,
       low + (bin + 1) * width AS bin_high, count(*) AS requests
FROM binned
GROUP BY ALL
ORDER BY workload, length, side DESC, bin
