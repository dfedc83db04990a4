-- One row per window (benchmark or load point) of imported evidence: the tool's own summary
-- rates beside the rates recomputed here from the request records the file carries (the
-- completed requests' tokens over the tool's own elapsed_s, its denominator). They agree
-- when the file is whole and the import read it as the tool counted; a total over records
-- of which one lacks the count stays NULL, never a partial sum.
CREATE VIEW imported_windows AS
WITH sums AS (
    SELECT window_id,
           CASE WHEN count(output_tokens) = count(*)
                THEN coalesce(sum(output_tokens), 0) END AS output_tokens,
           CASE WHEN count(prompt_tokens + output_tokens) = count(*)
                THEN coalesce(sum(prompt_tokens + output_tokens), 0) END AS total_tokens,
           string_agg(DISTINCT coalesce(token_source, 'not recorded'), ', '
                      ORDER BY coalesce(token_source, 'not recorded')) AS token_sources
    FROM request_records
    WHERE NOT is_warmup AND status = 'completed'
    GROUP BY window_id
)
SELECT w.run_id, w.window_id, r.source_tool, w.load_pattern, w.concurrency, w.submitted,
       w.completed, w.failed, w.unresolved, w.elapsed_s, w.denominator,
       s.output_tokens / w.elapsed_s AS output_tok_s, w.reported_output_tok_s,
       s.total_tokens / w.elapsed_s AS total_tok_s, w.reported_total_tok_s,
       s.token_sources
FROM windows AS w
JOIN runs AS r USING (run_id)
LEFT JOIN sums AS s USING (window_id)
WHERE r.evidence = 'imported'
