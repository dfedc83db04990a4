-- One row per gap between two consecutive text-bearing events of a request whose events'
-- token counts are known (token_source 'logprobs': content_event_tokens), like event_gaps
-- plus what the later event carried: its `tokens`, and itl_per_token_s = event_gap_s /
-- tokens, the inter-token latency of each of those tokens (an event of 4 tokens 40 ms after
-- the previous one: 4 tokens of 10 ms). Weight by `tokens` for per-token statistics. Requests
-- without per-event counts have no rows here: their gaps are never divided (event_gaps).
CREATE VIEW token_gaps AS
SELECT request_id, window_id, is_warmup, gap_index,
       (content_event_ns[gap_index + 1] - content_event_ns[gap_index]) / 1e9 AS event_gap_s,
       content_event_tokens[gap_index + 1] AS tokens,
       CASE WHEN content_event_tokens[gap_index + 1] > 0
            THEN (content_event_ns[gap_index + 1] - content_event_ns[gap_index]) / 1e9
                 / content_event_tokens[gap_index + 1] END AS itl_per_token_s
FROM (SELECT request_id, window_id, is_warmup, content_event_ns, content_event_tokens,
             unnest(range(1, len(content_event_ns))) AS gap_index
      FROM request_records
      WHERE len(content_event_tokens) = len(content_event_ns));
