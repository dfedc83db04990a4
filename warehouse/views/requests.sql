-- One row per HTTP request of request_records (warm-up included, is_warmup says which),
-- with its per-request metrics. They are derived here and nowhere else, from the raw
-- timestamps (the measuring process's monotonic perf_counter_ns) and the usage counts the
-- server delivered (docs/protocol.md, definitions): a metric computed in two places will disagree one
-- day. Rates use the counts token_source names (usage, logprobs, server_tokenizer) only; no
-- count, no rate.
CREATE VIEW requests AS
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
    r.usage_output_tokens,
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
    -- Only where each event's tokens are known (token_source 'logprobs'): every token after
    -- the first event gets its event's gap divided by that event's tokens; the mean over
    -- those tokens is the decode span over their number (view token_gaps: per event).
    CASE WHEN len(r.content_event_tokens) >= 2
              AND list_sum(r.content_event_tokens[2:]) > 0 AND r.t_last_ns > r.t_first_ns
         THEN (r.t_last_ns - r.t_first_ns) / 1e9 / list_sum(r.content_event_tokens[2:])
         END                                                                  AS itl_per_token_s,
    r.t_submit_ns,
    r.t_first_ns,
    r.t_last_ns,
    r.t_done_ns,
    r.raw_file_sha256
FROM request_records AS r;
