-- The requests behind one run's published decode-rate and TTFT means (entry_requests), for
-- the report's plots: nothing unpublished is drawn. A plot of 10^5 dots per restart says no
-- more than one of 200 and makes the page unreadable, so each (entry, restart) keeps at
-- most $per_restart requests: a fixed sample, chosen by the hash of the request id (the
-- same on every export), never the first ones measured. (An entry has one window per
-- restart, so sampling per window is sampling per restart.)
WITH plotted AS (
    SELECT entry_id, arm, workload, concurrency, metric, prompt_cache
    FROM published_entries
    WHERE run_id = $run_id AND statistic = 'mean' AND scope <> 'aggregate'
      AND metric IN ('decode_rate', 'ttft')
), chosen AS (
    -- the $per_restart smallest (hash, id) of each (entry, window): a top-n aggregate, not
    -- a sort of every request (at 10^6 requests a window function took seconds)
    SELECT q.entry_id, q.window_id,
           min_by(q.request_id, {'h': hash(q.request_id), 'id': q.request_id},
                  $per_restart) AS request_ids
    FROM plotted AS p
    JOIN entry_requests AS q USING (entry_id)
    GROUP BY q.entry_id, q.window_id
), sampled AS (
    SELECT entry_id, window_id, unnest(request_ids) AS request_id
    FROM chosen
)
SELECT e.entry_id, e.arm, e.workload, e.concurrency, e.metric, e.prompt_cache,
       w.restart_id, r.prompt_tokens, r.ttft_s,
       CASE e.metric WHEN 'decode_rate' THEN r.decode_tok_s ELSE r.ttft_s END AS value
FROM sampled AS s
JOIN plotted AS e USING (entry_id)
JOIN windows AS w ON w.window_id = s.window_id
-- Only this run's windows' requests: the view must not be expanded over every stored run.
JOIN requests AS r ON r.request_id = s.request_id AND r.window_id = s.window_id
WHERE w.run_id = $run_id
ORDER BY e.entry_id, r.request_id
