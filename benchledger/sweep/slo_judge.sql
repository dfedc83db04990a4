-- Which requests met which SLO (issue #27; docs/protocol.md: SLOs, goodput and the
-- frontier): the one definition, run by the warehouse over a run's windows
-- (warehouse/derive.py) and by a searching restart over the window it just measured
-- (benchledger/restart/rate_search.py). Relations, registered by the caller:
--   slo_requests (cell, window_id, request_id, status, output_tokens, t_submit_ns,
--                 t_first_ns, t_last_ns, t_done_ns, t_first_reasoning_ns, t_last_reasoning_ns,
--                 content_event_ns): the measured requests (warm-up left out)
--   slo_bounds (cell, slo, metric, max_s): each cell's SLOs
-- Returns per window and SLO the requests that met it, and (slo = '*') those that met
-- every SLO of their cell with their output tokens (NULL when one of them lacks a count).
-- Judged on what the user saw, from the raw stamps (one monotonic clock per measuring
-- process):
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
    SELECT r.window_id, r.request_id, s.slo, r.output_tokens,
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
    FROM slo_requests AS r
    JOIN slo_bounds AS s ON s.cell = r.cell
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
