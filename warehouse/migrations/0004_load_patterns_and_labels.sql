-- Issue #3: load patterns, cold prompts, long inputs, and the labels every entry carries.

ALTER TABLE windows ADD COLUMN arrival VARCHAR;              -- closed | poisson
ALTER TABLE windows ADD COLUMN requested_rate_rps DOUBLE;    -- poisson: the asked-for rate
ALTER TABLE windows ADD COLUMN achieved_rate_rps DOUBLE;     -- submissions/s actually sent
ALTER TABLE windows ADD COLUMN prompt_cache VARCHAR;         -- warm | cold
ALTER TABLE windows ADD COLUMN input_tokens_target INTEGER;  -- filler length asked for
ALTER TABLE windows ADD COLUMN seed BIGINT;                  -- arrivals and cold prefixes
ALTER TABLE windows ADD COLUMN denominator VARCHAR;          -- what elapsed_s spans

ALTER TABLE request_records ADD COLUMN prompt_prefix VARCHAR;  -- the unique cold prefix

-- The views that show it (requests, with prefill_tok_s) and the gaps between content
-- events (event_gaps) live in warehouse/views/.

-- Every entry describes its workload and its window state, so two entries can only be
-- compared when these match (docs/protocol.md: T6-T9, T12-T15).
ALTER TABLE entries ADD COLUMN arrival VARCHAR;
ALTER TABLE entries ADD COLUMN requested_rate_rps DOUBLE;
ALTER TABLE entries ADD COLUMN achieved_rate_rps DOUBLE;
ALTER TABLE entries ADD COLUMN prompt_cache VARCHAR;
ALTER TABLE entries ADD COLUMN input_tokens_target INTEGER;
ALTER TABLE entries ADD COLUMN n_submitted INTEGER;
ALTER TABLE entries ADD COLUMN n_completed INTEGER;
ALTER TABLE entries ADD COLUMN n_failed INTEGER;
ALTER TABLE entries ADD COLUMN n_unresolved INTEGER;
ALTER TABLE entries ADD COLUMN drain_status VARCHAR;  -- incomplete if any window was
ALTER TABLE entries ADD COLUMN mean_cached_tokens DOUBLE;
