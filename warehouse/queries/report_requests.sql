-- The requests behind one run's published decode-rate and TTFT means (entry_requests), for
-- the report's plots: nothing unpublished is drawn.
SELECT e.entry_id, e.arm, e.workload, e.concurrency, e.metric, e.prompt_cache,
       w.restart_id, r.prompt_tokens, r.ttft_s,
       CASE e.metric WHEN 'decode_rate' THEN r.decode_tok_s ELSE r.ttft_s END AS value
FROM published_entries AS e
JOIN entry_requests AS q USING (entry_id)
JOIN requests AS r ON r.request_id = q.request_id
JOIN windows AS w ON w.window_id = r.window_id
WHERE e.run_id = $run_id AND e.statistic = 'mean'
  AND e.scope <> 'aggregate' AND e.metric IN ('decode_rate', 'ttft')
ORDER BY e.entry_id, r.request_id
