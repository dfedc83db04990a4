-- Per window of one imported run: totals over its completed measured request records, for
-- the entries derived from imported evidence (warehouse/evidence_entries.py). A total over
-- records of which one lacks the count is NULL (no rate), never the sum of the others; a
-- window without completed records has totals of 0. token_sources lists the distinct
-- sources of its completed records ('not recorded' for a NULL).
SELECT w.window_id,
       count(r.request_id) AS n_done,
       CASE WHEN count(r.output_tokens) = count(r.request_id)
            THEN coalesce(sum(r.output_tokens), 0) END AS output_tokens,
       CASE WHEN count(r.prompt_tokens + r.output_tokens) = count(r.request_id)
            THEN coalesce(sum(r.prompt_tokens + r.output_tokens), 0) END AS total_tokens,
       avg(r.prompt_tokens) AS mean_prompt_tokens,
       avg(r.output_tokens) AS mean_output_tokens,
       avg(r.cached_tokens) AS mean_cached_tokens,
       string_agg(DISTINCT coalesce(r.token_source, 'not recorded'), ', '
                  ORDER BY coalesce(r.token_source, 'not recorded')) AS token_sources
FROM windows AS w
LEFT JOIN request_records AS r
       ON r.window_id = w.window_id AND NOT r.is_warmup AND r.status = 'completed'
WHERE w.run_id = $run_id
GROUP BY w.window_id
ORDER BY w.window_id
