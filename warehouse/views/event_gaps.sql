-- One row per gap between two consecutive content-bearing stream events of a request
-- (gap_index k: from event k to event k + 1, in seconds). An event may carry several
-- tokens (speculative decoding), so a gap is never divided into a per-token ITL here; where
-- each event's tokens are known, token_gaps spreads it over them.
CREATE VIEW event_gaps AS
SELECT request_id, window_id, is_warmup, gap_index,
       (content_event_ns[gap_index + 1] - content_event_ns[gap_index]) / 1e9 AS event_gap_s
FROM (SELECT request_id, window_id, is_warmup, content_event_ns,
             unnest(range(1, len(content_event_ns))) AS gap_index
      FROM request_records);
