-- Per window and SLO (issue #27): how many of its submitted measured requests met the SLO,
-- and over every SLO of its workload (slo = '*': the DistServe goodput's requests) how many
-- met all of them and their output tokens. `derive_windows` (window_id, restart_id, cell)
-- and `derive_slos` (cell, slo, metric, max_s) are registered by the caller
-- (warehouse/derive.py). Judged on what the user saw, from the raw stamps (one monotonic
-- clock per measuring process):
--   ttft         submission to the first answer token
--   first_token  submission to the first token of either kind (reasoning or answer)
--   itl          the longest gap between consecutive answer events after the first
--   tpot         first to last token of either kind over output_tokens - 1
--   e2e_latency  submission to the last byte
-- A request meets an SLO only when it completed and its value is within the bound: a
-- failed or unfinished request misses every SLO, and so does a value that cannot be known
-- (no token count for tpot). tpot and itl of a request with one output token (or one
-- event) have no gap to exceed: they are met.
WITH judged AS (
    SELECT d.window_id, r.request_id, s.slo, r.output_tokens,
           r.status = 'completed' AND coalesce(CASE s.metric
               WHEN 'ttft' THEN (r.t_first_ns - r.t_submit_ns) / 1e9 <= s.max_s
               WHEN 'first_token' THEN
                   (least(r.t_first_ns, r.t_first_reasoning_ns) - r.t_submit_ns) / 1e9
                       <= s.max_s
               WHEN 'e2e_latency' THEN (r.t_done_ns - r.t_submit_ns) / 1e9 <= s.max_s
               WHEN 'itl' THEN
                   CASE WHEN coalesce(len(r.content_event_ns), 0) < 2 THEN true
                        ELSE list_max(list_transform(
                                 range(2, len(r.content_event_ns) + 1),
                                 lambda i: r.content_event_ns[i] - r.content_event_ns[i - 1]))
                             / 1e9 <= s.max_s END
               WHEN 'tpot' THEN
                   CASE WHEN r.output_tokens < 2 THEN true
                        ELSE (greatest(r.t_last_ns, r.t_last_reasoning_ns)
                              - least(r.t_first_ns, r.t_first_reasoning_ns))
                             / 1e9 / (r.output_tokens - 1) <= s.max_s END
           END, false) AS met
    FROM derive_windows AS d
    JOIN derive_slos AS s ON s.cell = d.cell
    JOIN request_records AS r ON r.window_id = d.window_id AND NOT r.is_warmup
), per_request AS (
    SELECT window_id, request_id, bool_and(met) AS met, any_value(output_tokens) AS output_tokens
    FROM judged
    GROUP BY window_id, request_id
)
SELECT window_id, slo, count(*) FILTER (WHERE met) AS met, NULL::BIGINT AS met_output_tokens
FROM judged
GROUP BY window_id, slo
UNION ALL
SELECT window_id, '*' AS slo, count(*) FILTER (WHERE met) AS met,
       CASE WHEN count(output_tokens) FILTER (WHERE met) = count(*) FILTER (WHERE met)
            THEN coalesce(sum(output_tokens) FILTER (WHERE met), 0) END AS met_output_tokens
FROM per_request
GROUP BY window_id
