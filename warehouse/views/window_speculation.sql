-- One row per window (measured or imported): whether its evidence shows speculative
-- decoding, whatever the sweep declared (issue #23, item 2; measured runs only, see below). The n floor (rule n_at_least_min, T4: 15 speculative, 5
-- otherwise) and entries.speculation_source read it.
--
-- Two kinds of evidence, counters first:
-- - counters: a server counter named like vLLM's vllm:spec_decode_* (drafts, draft
--   tokens, accepted tokens; any family's *spec_decode*_total) rose between the scrapes
--   before and after the window (spec_drafts: the drafts counter's delta, NULL without it).
-- - chunks: over the window's completed measured requests with an output count and at
--   least 2 content events (a single event says nothing: a whole answer in one event), the
--   output tokens exceed 1.1 x (content events + 1 per request). The one token per request
--   is one a non-speculative server may count without streaming text for it (a stop
--   token), the 10% the odd event that carried two (a character split over tokens); a
--   speculative server's events carry 1 + the accepted drafts, typically 1.5 to 4.
--   streamed_tokens_per_chunk is the plain ratio (output tokens / content events).
-- A non-speculative server streams one token per event: tokens_per_chunk exactly 1.
CREATE VIEW window_speculation AS
WITH counters AS (
    SELECT m.window_id, m.name, m.labels,
           sum(CASE WHEN m.phase = 'after' THEN m.value ELSE -m.value END) AS delta
    FROM server_metrics AS m
    WHERE m.name LIKE '%spec\_decode%\_total' ESCAPE '\'
    GROUP BY m.window_id, m.name, m.labels
    HAVING count(*) FILTER (WHERE m.phase = 'after') > 0
       AND count(*) FILTER (WHERE m.phase = 'before') > 0
),
moved AS (
    SELECT window_id,
           sum(delta) FILTER (WHERE name LIKE '%spec\_decode\_num\_drafts\_total' ESCAPE '\')
               AS spec_drafts,
           sum(delta) FILTER (WHERE name LIKE '%spec\_decode\_num\_accepted\_tokens\_total'
                                   ESCAPE '\') AS spec_accepted,
           bool_or(delta > 0) AS counters_moved
    FROM counters
    GROUP BY window_id
),
streamed AS (
    SELECT r.window_id,
           count(*) AS streamed_requests,
           sum(r.output_tokens) AS streamed_tokens,
           sum(r.chunks) AS streamed_chunks
    FROM request_records AS r
    WHERE NOT r.is_warmup AND r.status = 'completed' AND r.output_tokens IS NOT NULL
      AND r.chunks >= 2
    GROUP BY r.window_id
)
SELECT w.window_id, w.run_id, w.arm,
       m.spec_drafts, m.spec_accepted,
       coalesce(m.counters_moved, false) AS counters_moved,
       s.streamed_requests, s.streamed_tokens, s.streamed_chunks,
       s.streamed_tokens / s.streamed_chunks AS streamed_tokens_per_chunk,
       coalesce(s.streamed_tokens > 1.1 * (s.streamed_chunks + s.streamed_requests), false)
           AS chunks_show_it,
       -- Imported evidence is left to its tool's own accounting (a tool's stream
       -- iterations or chunks need not be one token each): observed for measured runs only.
       CASE WHEN ru.evidence = 'imported' THEN NULL
            WHEN m.counters_moved THEN 'observed: counters'
            WHEN s.streamed_tokens > 1.1 * (s.streamed_chunks + s.streamed_requests)
                 THEN 'observed: chunks' END AS speculation_observed
FROM windows AS w
LEFT JOIN runs AS ru ON ru.run_id = w.run_id
LEFT JOIN moved AS m ON m.window_id = w.window_id
LEFT JOIN streamed AS s ON s.window_id = w.window_id;
