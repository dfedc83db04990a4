-- Delivered numbers beside what the server said, per arm and workload (docs/protocol.md: T1-T3):
-- the client's rates, the server log's peak and mean, tokens per chunk, the acceptance
-- length from the spec-decode counters, and how the counters reconciled.
WITH e AS (
    SELECT arm, workload, concurrency, metric, scope, statistic, numerator, value
    FROM published_entries  -- what is shown must have passed every rule
    WHERE run_id = $run_id
), cells AS (
    SELECT DISTINCT arm, workload, concurrency FROM e
), recon AS (
    SELECT w.arm, w.workload, w.concurrency,
           count(*) FILTER (WHERE r.status IN ('match', 'lower bound')) AS reconciled,
           count(*) FILTER (WHERE r.status = 'mismatch') AS mismatched,
           count(*) AS checks
    FROM reconciliations AS r
    JOIN windows AS w USING (window_id)
    WHERE w.run_id = $run_id
    GROUP BY ALL
)
SELECT c.arm, c.workload, c.concurrency,
       max(e.value) FILTER (WHERE e.metric = 'throughput' AND e.numerator = 'output_tokens')
           AS delivered_throughput,
       max(e.value) FILTER (WHERE e.metric = 'decode_rate' AND e.scope <> 'aggregate'
                            AND e.statistic = 'mean') AS delivered_decode_rate,
       max(e.value) FILTER (WHERE e.metric = 'server_log_generation_throughput'
                            AND e.statistic = 'server_log_peak') AS server_log_peak,
       max(e.value) FILTER (WHERE e.metric = 'server_log_generation_throughput'
                            AND e.statistic = 'server_log_mean') AS server_log_mean,
       max(e.value) FILTER (WHERE e.metric = 'tokens_per_chunk' AND e.statistic = 'mean')
           AS tokens_per_chunk,
       max(e.value) FILTER (WHERE e.metric = 'mean_acceptance_length')
           AS counter_acceptance_length,
       any_value(recon.reconciled) AS reconciled,
       any_value(recon.mismatched) AS mismatched,
       any_value(recon.checks) AS checks
FROM cells AS c
LEFT JOIN e USING (arm, workload, concurrency)
LEFT JOIN recon USING (arm, workload, concurrency)
GROUP BY c.arm, c.workload, c.concurrency
ORDER BY c.arm, c.workload, c.concurrency
