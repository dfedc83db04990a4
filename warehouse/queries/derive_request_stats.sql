-- Per-request metrics of the completed measured requests in the windows derivation uses
-- (`derive_windows`: window_id, restart_id, cell; registered by the caller), summarised per
-- (cell, metric column, restart) and, pooled over restarts, per (cell, metric column; then
-- restart_id is NULL). UNPIVOT drops NULL values, so a request without a metric (a one-token
-- answer has no decode rate) is left out of that metric only, as derivation always did.
-- The ON list names warehouse/metrics.py's REQUEST_METRICS columns (a test holds them
-- together). quantile_cont interpolates linearly, as numpy.percentile does.
WITH done AS (
    SELECT d.cell, d.restart_id,
           r.decode_tok_s, r.e2e_tok_s, r.prefill_tok_s, r.ttft_s, r.tpot_s, r.e2e_s,
           r.tokens_per_chunk, r.itl_per_token_s, r.ttfrt_s, r.answer_decode_tok_s,
           r.decode_with_reasoning_tok_s, r.ttft_first_turn_s, r.ttft_later_turns_s,
           r.session_s
    FROM derive_windows AS d
    JOIN requests AS r ON r.window_id = d.window_id
    WHERE NOT r.is_warmup AND r.status = 'completed'
), long AS (
    UNPIVOT done
    ON decode_tok_s, e2e_tok_s, prefill_tok_s, ttft_s, tpot_s, e2e_s, tokens_per_chunk, itl_per_token_s, ttfrt_s, answer_decode_tok_s, decode_with_reasoning_tok_s, ttft_first_turn_s, ttft_later_turns_s, session_s
    INTO NAME metric_column VALUE value
)
SELECT cell, metric_column, restart_id,
       count(*) AS n,
       avg(value) AS mean,
       stddev_samp(value) AS sd,
       quantile_cont(value, [0.5, 0.9, 0.99]) AS quantiles,
       min(value) AS min,
       max(value) AS max
FROM long
GROUP BY GROUPING SETS ((cell, metric_column, restart_id), (cell, metric_column))
ORDER BY cell, metric_column, restart_id NULLS FIRST
