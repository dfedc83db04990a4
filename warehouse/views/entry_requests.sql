-- One row per (entry, request it rests on), with the request's window. entry_lineage stores what an entry rests on per
-- window (and which requests of it count: request_metric); this view expands that to the
-- requests on demand, so auditors still get "exactly these requests" while storage grows
-- with windows, not with entries x requests. The WHEN list names every per-request metric
-- column derivation summarises (warehouse/metrics.py REQUEST_METRICS; a test holds them
-- together). Lineage rows from before per-window lineage name their request directly.
CREATE VIEW entry_requests AS
SELECT l.entry_id, r.request_id, r.window_id
FROM entry_lineage AS l
JOIN requests AS r ON r.window_id = l.window_id
WHERE NOT r.is_warmup AND r.status = 'completed'
  AND CASE l.request_metric
          WHEN 'decode_tok_s' THEN r.decode_tok_s IS NOT NULL
          WHEN 'e2e_tok_s' THEN r.e2e_tok_s IS NOT NULL
          WHEN 'prefill_tok_s' THEN r.prefill_tok_s IS NOT NULL
          WHEN 'ttft_s' THEN r.ttft_s IS NOT NULL
          WHEN 'tpot_s' THEN r.tpot_s IS NOT NULL
          WHEN 'e2e_s' THEN r.e2e_s IS NOT NULL
          WHEN 'tokens_per_chunk' THEN r.tokens_per_chunk IS NOT NULL
          WHEN 'itl_per_token_s' THEN r.itl_per_token_s IS NOT NULL
          WHEN 'ttfrt_s' THEN r.ttfrt_s IS NOT NULL
          WHEN 'answer_decode_tok_s' THEN r.answer_decode_tok_s IS NOT NULL
          WHEN 'decode_with_reasoning_tok_s' THEN r.decode_with_reasoning_tok_s IS NOT NULL
          WHEN 'ttft_first_turn_s' THEN r.ttft_first_turn_s IS NOT NULL
          WHEN 'ttft_later_turns_s' THEN r.ttft_later_turns_s IS NOT NULL
          WHEN 'session_s' THEN r.session_s IS NOT NULL
          ELSE l.request_metric IS NULL
      END
UNION ALL
SELECT l.entry_id, l.request_id, rr.window_id
FROM entry_lineage AS l
JOIN request_records AS rr USING (request_id)
WHERE l.request_id IS NOT NULL
