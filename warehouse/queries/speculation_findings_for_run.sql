-- The arms of one run whose entries say their speculation was observed, not declared
-- (entries.speculation_source 'observed: ...': the sweep did not declare the arm
-- speculative, its windows showed it; issue #23, item 2), with the evidence: how many of
-- its windows showed it and how (view window_speculation), their streamed tokens per
-- content event and the acceptance length of their spec-decode counters (1 + accepted /
-- drafts; NULL: no counter). `run`'s terminal lists them as findings.
SELECT w.arm,
       count(*) AS windows,
       count(s.speculation_observed) AS windows_speculating,
       string_agg(DISTINCT s.speculation_observed, ', ' ORDER BY s.speculation_observed)
           AS sources,
       sum(s.streamed_tokens) FILTER (WHERE s.speculation_observed IS NOT NULL)
           / sum(s.streamed_chunks) FILTER (WHERE s.speculation_observed IS NOT NULL)
           AS tokens_per_chunk,
       1 + sum(s.spec_accepted) FILTER (WHERE s.spec_drafts > 0)
           / sum(s.spec_drafts) FILTER (WHERE s.spec_drafts > 0) AS acceptance_length
FROM windows AS w
JOIN window_speculation AS s ON s.window_id = w.window_id
WHERE w.run_id = $run_id
  AND w.arm IN (SELECT arm FROM entries
                WHERE run_id = $run_id AND speculation_source LIKE 'observed%')
GROUP BY w.arm
ORDER BY w.arm
