-- Issue #3: load patterns, cold prompts, long inputs, and the labels every entry carries.

ALTER TABLE windows ADD COLUMN arrival VARCHAR;              -- closed | poisson
ALTER TABLE windows ADD COLUMN requested_rate_rps DOUBLE;    -- poisson: the asked-for rate
ALTER TABLE windows ADD COLUMN achieved_rate_rps DOUBLE;     -- submissions/s actually sent
ALTER TABLE windows ADD COLUMN prompt_cache VARCHAR;         -- warm | cold
ALTER TABLE windows ADD COLUMN input_tokens_target INTEGER;  -- filler length asked for
ALTER TABLE windows ADD COLUMN seed BIGINT;                  -- arrivals and cold prefixes
ALTER TABLE windows ADD COLUMN denominator VARCHAR;          -- what elapsed_s spans

ALTER TABLE request_records ADD COLUMN prompt_prefix VARCHAR;  -- the unique cold prefix

CREATE OR REPLACE VIEW requests AS
SELECT
    r.request_id,
    r.window_id,
    r.seq,
    r.is_warmup,
    r.status,
    r.http_status,
    r.error,
    r.prompt_id,
    r.prompt_sha256,
    r.prompt_prefix,
    r.max_tokens,
    r.temperature,
    r.prompt_tokens,
    r.output_tokens,
    r.cached_tokens,
    r.token_source,
    r.chunks,
    r.finish_reason,
    (r.t_first_ns - r.t_submit_ns) / 1e9                                  AS ttft_s,
    (r.t_done_ns - r.t_submit_ns) / 1e9                                   AS e2e_s,
    CASE WHEN r.output_tokens >= 2 AND r.t_last_ns > r.t_first_ns
         THEN (r.t_last_ns - r.t_first_ns) / 1e9 / (r.output_tokens - 1) END AS tpot_s,
    CASE WHEN r.output_tokens >= 2 AND r.t_last_ns > r.t_first_ns
         THEN (r.output_tokens - 1) / ((r.t_last_ns - r.t_first_ns) / 1e9) END AS decode_tok_s,
    CASE WHEN r.output_tokens IS NOT NULL AND r.t_done_ns > r.t_submit_ns
         THEN r.output_tokens / ((r.t_done_ns - r.t_submit_ns) / 1e9) END     AS e2e_tok_s,
    CASE WHEN r.prompt_tokens IS NOT NULL AND r.t_first_ns > r.t_submit_ns
         THEN r.prompt_tokens / ((r.t_first_ns - r.t_submit_ns) / 1e9) END    AS prefill_tok_s,
    CASE WHEN r.output_tokens IS NOT NULL AND r.chunks > 0
         THEN r.output_tokens / r.chunks END                                  AS tokens_per_chunk,
    r.t_submit_ns,
    r.t_first_ns,
    r.t_last_ns,
    r.t_done_ns,
    r.raw_file_sha256
FROM request_records AS r;

-- Gaps between consecutive content-bearing events of a request. An event may carry several
-- tokens (speculative decoding), so a gap is never divided into a per-token ITL here.
CREATE VIEW event_gaps AS
SELECT request_id, window_id, is_warmup, gap_index,
       (content_event_ns[gap_index + 1] - content_event_ns[gap_index]) / 1e9 AS event_gap_s
FROM (SELECT request_id, window_id, is_warmup, content_event_ns,
             unnest(range(1, len(content_event_ns))) AS gap_index
      FROM request_records);

-- Every entry describes its workload and its window state, so two entries can only be
-- compared when these match (PROTOCOL T6-T9, T12-T15).
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
