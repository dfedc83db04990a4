-- Totals over each window's completed measured requests, for the window-level entries and
-- the labels every entry carries (`derive_windows` registered by the caller): a measured
-- run's passing windows (warehouse/derive.py) or an imported run's windows
-- (warehouse/evidence_entries.py), one query for both. A window without completed
-- requests gets zeros (and NULL decode span). A total over requests of which some lack the
-- count is NULL, never the sum of the others or 0: a missing count stays missing (no
-- rate), it is not guessed (T16). burst_requests: those whose decode span the requests view
-- withheld (rate_withheld: their tokens arrived at once, T17).
SELECT d.window_id,
       count(r.request_id) AS n_done,
       CASE WHEN count(r.output_tokens) = count(r.request_id)
            THEN coalesce(sum(r.output_tokens), 0) END AS output_tokens,
       CASE WHEN count(r.prompt_tokens + r.output_tokens) = count(r.request_id)
            THEN coalesce(sum(r.prompt_tokens + r.output_tokens), 0) END AS total_tokens,
       sum(r.prompt_tokens) AS prompt_tokens_sum, count(r.prompt_tokens) AS prompt_tokens_n,
       sum(r.output_tokens) AS output_tokens_sum, count(r.output_tokens) AS output_tokens_n,
       sum(r.cached_tokens) AS cached_tokens_sum, count(r.cached_tokens) AS cached_tokens_n,
       -- where the window's output token counts came from (one value when all agree);
       -- 'not recorded' for an imported record without one (a measured record always has
       -- one: the client writes it, and a rule blocks its window otherwise)
       string_agg(DISTINCT coalesce(r.token_source, 'not recorded'), ', '
                  ORDER BY coalesce(r.token_source, 'not recorded')) AS token_sources,
       -- The aggregate decode rate: tokens after each request's first, over the span from
       -- the earliest first token to the latest last token of the window's timed requests.
       min(r.t_first_ns) FILTER (WHERE r.t_last_ns IS NOT NULL) AS decode_start_ns,
       max(r.t_last_ns) FILTER (WHERE r.t_first_ns IS NOT NULL) AS decode_end_ns,
       CASE WHEN count(*) FILTER (WHERE r.t_first_ns IS NOT NULL AND r.t_last_ns IS NOT NULL
                                    AND r.output_tokens IS NULL) = 0
            THEN coalesce(sum(r.output_tokens - 1)
                          FILTER (WHERE r.t_first_ns IS NOT NULL AND r.t_last_ns IS NOT NULL),
                          0) END AS decode_tokens,
       count(r.rate_withheld) AS burst_requests,
       -- reasoning models (issue #26): requests that streamed reasoning, and their reasoning
       -- tokens (NULL when any of them lacks the count)
       count(*) FILTER (WHERE r.has_reasoning) AS reasoning_requests,
       CASE WHEN count(*) FILTER (WHERE r.has_reasoning AND r.reasoning_tokens IS NULL) = 0
            THEN coalesce(sum(r.reasoning_tokens), 0) END AS reasoning_tokens
FROM derive_windows AS d
LEFT JOIN requests AS r
       ON r.window_id = d.window_id AND NOT r.is_warmup AND r.status = 'completed'
GROUP BY d.window_id
