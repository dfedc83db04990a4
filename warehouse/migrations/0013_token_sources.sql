-- Issue #13: token counts with a name for where they came from, and per-token gaps where
-- they are known (docs/protocol.md, tokens and chunks). Raw files written before this carry
-- none of it: their rows keep NULL (not recorded; their token_source was usage or missing).

-- usage.completion_tokens as reported, whatever token_source says: where output_tokens come
-- from the streamed logprobs, the rule logprobs_match_usage holds the two together.
ALTER TABLE request_records ADD COLUMN usage_output_tokens BIGINT;
-- The tokens each text-bearing event carried (token_source 'logprobs'), parallel to
-- content_event_ns; NULL where unknown. The view token_gaps spreads each event's gap over them.
ALTER TABLE request_records ADD COLUMN content_event_tokens INTEGER[];

-- The arm's token_count when the window was measured: usage | logprobs | server_tokenizer.
ALTER TABLE windows ADD COLUMN token_count VARCHAR;
-- token_count = 'server_tokenizer': the non-streamed calibration requests sent after the
-- window, how many had both counts (usage and the tokenizer's), the relative error of their
-- totals (what the rule tokenizer_calibrated judges against reconcile_tolerance), the worst
-- single request's, and the sentence that says it; the tokens the endpoint adds to any text
-- (its count of the empty text, subtracted from every count).
ALTER TABLE windows ADD COLUMN calibration_requests INTEGER;
ALTER TABLE windows ADD COLUMN calibration_compared INTEGER;
ALTER TABLE windows ADD COLUMN calibration_rel_error DOUBLE;
ALTER TABLE windows ADD COLUMN calibration_max_rel_error DOUBLE;
ALTER TABLE windows ADD COLUMN calibration_detail VARCHAR;
ALTER TABLE windows ADD COLUMN tokenizer_special_tokens INTEGER;

-- The token source an entry rests on: the one token_source of the completed measured
-- requests of its windows (usage | logprobs | server_tokenizer), 'mixed (...)' when they
-- differ (the rule entry_token_source_single blocks it), NULL without windows.
ALTER TABLE entries ADD COLUMN token_source VARCHAR;
