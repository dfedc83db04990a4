-- One row per HTTP request of request_records (warm-up included, is_warmup says which),
-- with its per-request metrics. They are derived here and nowhere else, from the raw
-- timestamps (the measuring process's monotonic perf_counter_ns) and the usage counts the
-- server delivered (docs/protocol.md, definitions): a metric computed in two places will disagree one
-- day. Rates use the counts token_source names (usage, logprobs, server_tokenizer) only; no
-- count, no rate.
--
-- A request whose tokens after the first arrived at once (a burst: a server that stalled and
-- then sent a whole answer, or a client too late to tell its events apart; T17) has no
-- measured decode span: its decode_tok_s, tpot_s and itl_per_token_s are NULL and
-- rate_withheld says what was seen (NULL: its events were spread). A completed request with
-- at least 2 content events is a burst when its span t_last - t_first is shorter than its
-- window's client lag p99 (no lag known: this criterion does not apply), or when at least 3
-- events after the first arrived in at most 2 reads (distinct stamps after t_first). Events
-- of one read share a stamp. A request without event stamps (some imports) is never one.
--
-- A completed request with at least 2 content events that all arrived in one network read
-- (one stamp: t_first = t_last) was delivered whole, not streamed: a proxy that buffers, or
-- gzip without flushes (issue #22). Its first token's time is the whole answer's, so it has
-- no ttft_s and no prefill_tok_s either (delivered_in_one_read, and rate_withheld says so);
-- its e2e_s stays. The rule streams_not_buffered judges each window's share of them. With
-- one content event a stream and a buffered body look alike: never counted as one.
--
-- Reasoning models (issue #26): what streamed as reasoning is not the answer. t_first_ns is
-- the first ANSWER token (ttft_s: time to first output token); ttfrt_s is the time to the
-- first reasoning token. usage's completion tokens count both, so a request that streamed
-- reasoning (has_reasoning) has no decode_tok_s, e2e_tok_s or tpot_s (their numerator,
-- output_tokens, would hold reasoning tokens over a span that does not): its rates are
-- answer_decode_tok_s (answer tokens = output - reasoning tokens, over the answer's span)
-- and decode_with_reasoning_tok_s (all output tokens, over the span from the first token
-- of either kind to the last), each entry naming its numerator. Its prefill span ends at
-- its first token of either kind.
--
-- Multi-turn sessions (issue #26): ttft_first_turn_s and ttft_later_turns_s split TTFT by
-- turn (a later turn's history may come from the prefix cache: cached_tokens); session_s,
-- on a session's last turn only, is first submission to last answer of a session whose
-- turns all completed.
CREATE VIEW requests AS
WITH sessions AS (
    SELECT window_id, session, max(turn) AS last_turn,
           count(*) = count(*) FILTER (WHERE status = 'completed') AS whole,
           (max(t_done_ns) - min(t_submit_ns)) / 1e9 AS span_s
    FROM request_records
    WHERE session IS NOT NULL
    GROUP BY window_id, session
), spread AS (
    -- Stamps are in arrival order (one monotonic clock), so a request whose events after
    -- the first fill at most 2 reads has two equal neighbours at its start or end: only
    -- those requests (few) pay for counting their distinct reads. CASE, not AND: DuckDB
    -- evaluates only the rows a branch selects.
    -- The lag that judges a span: the client's lag while that span ran (client_lag_ms), or
    -- where it was not measured (older raw files, imports) the window's p99.
    SELECT r.*, coalesce(r.client_lag_ms, w.client_lag_p99_ms) AS span_lag_ms,
           r.client_lag_ms IS NOT NULL AS span_lag_measured,
           CASE WHEN r.status IS DISTINCT FROM 'completed'
                     OR coalesce(len(r.content_event_ns), 0) < 2 THEN false
                WHEN (r.t_last_ns - r.t_first_ns) < coalesce(r.client_lag_ms,
                                                             w.client_lag_p99_ms) * 1e6
                     THEN true
                WHEN len(r.content_event_ns) >= 4
                     AND (r.content_event_ns[2] = r.content_event_ns[1]
                          OR r.content_event_ns[2] = r.content_event_ns[3]
                          OR r.content_event_ns[-1] = r.content_event_ns[-2])
                     THEN list_unique(list_filter(r.content_event_ns,
                                                  lambda t: t > r.t_first_ns)) <= 2
                ELSE false END AS is_burst,
           coalesce(r.status = 'completed' AND len(r.content_event_ns) >= 2
                    AND r.t_first_ns = r.t_last_ns, false) AS delivered_in_one_read,
           coalesce(r.reasoning_chunks, 0) > 0 OR coalesce(r.reasoning_tokens, 0) > 0
               AS has_reasoning,
           -- the first token of either kind (reasoning or answer): where prefill ends
           least(r.t_first_reasoning_ns, r.t_first_ns) AS t_first_any_ns,
           greatest(r.t_last_reasoning_ns, r.t_last_ns) AS t_last_any_ns,
           CASE WHEN s.whole AND r.turn = s.last_turn THEN s.span_s END AS session_span_s
    FROM request_records AS r
    LEFT JOIN windows AS w ON w.window_id = r.window_id
    LEFT JOIN sessions AS s ON s.window_id = r.window_id AND s.session = r.session
)
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
    CASE WHEN NOT r.delivered_in_one_read
         THEN (r.t_first_ns - r.t_submit_ns) / 1e9 END                        AS ttft_s,
    (r.t_done_ns - r.t_submit_ns) / 1e9                                   AS e2e_s,
    CASE WHEN r.output_tokens >= 2 AND r.t_last_ns > r.t_first_ns AND r.is_burst IS NOT TRUE
              AND NOT r.has_reasoning
         THEN (r.t_last_ns - r.t_first_ns) / 1e9 / (r.output_tokens - 1) END AS tpot_s,
    CASE WHEN r.output_tokens >= 2 AND r.t_last_ns > r.t_first_ns AND r.is_burst IS NOT TRUE
              AND NOT r.has_reasoning
         THEN (r.output_tokens - 1) / ((r.t_last_ns - r.t_first_ns) / 1e9) END AS decode_tok_s,
    CASE WHEN r.output_tokens IS NOT NULL AND r.t_done_ns > r.t_submit_ns
              AND NOT r.has_reasoning
         THEN r.output_tokens / ((r.t_done_ns - r.t_submit_ns) / 1e9) END     AS e2e_tok_s,
    CASE WHEN r.prompt_tokens IS NOT NULL AND r.t_first_any_ns > r.t_submit_ns
              AND NOT r.delivered_in_one_read
         THEN r.prompt_tokens / ((r.t_first_any_ns - r.t_submit_ns) / 1e9) END AS prefill_tok_s,
    CASE WHEN r.output_tokens IS NOT NULL AND r.chunks + coalesce(r.reasoning_chunks, 0) > 0
         THEN r.output_tokens / (r.chunks + coalesce(r.reasoning_chunks, 0))
         END                                                                  AS tokens_per_chunk,
    CASE WHEN r.t_first_reasoning_ns IS NOT NULL
         THEN (r.t_first_reasoning_ns - r.t_submit_ns) / 1e9 END              AS ttfrt_s,
    CASE WHEN r.turn = 0 AND NOT r.delivered_in_one_read
         THEN (r.t_first_ns - r.t_submit_ns) / 1e9 END                        AS ttft_first_turn_s,
    CASE WHEN r.turn > 0 AND NOT r.delivered_in_one_read
         THEN (r.t_first_ns - r.t_submit_ns) / 1e9 END                        AS ttft_later_turns_s,
    r.session_span_s                                                          AS session_s,
    CASE WHEN r.has_reasoning AND r.reasoning_tokens IS NOT NULL
              AND r.output_tokens - r.reasoning_tokens >= 2 AND r.t_last_ns > r.t_first_ns
              AND r.is_burst IS NOT TRUE
         THEN (r.output_tokens - r.reasoning_tokens - 1) / ((r.t_last_ns - r.t_first_ns) / 1e9)
         END                                                                  AS answer_decode_tok_s,
    CASE WHEN r.has_reasoning AND r.output_tokens >= 2 AND r.t_last_any_ns > r.t_first_any_ns
         THEN (r.output_tokens - 1) / ((r.t_last_any_ns - r.t_first_any_ns) / 1e9)
         END                                                                  AS decode_with_reasoning_tok_s,
    -- Only where each event's tokens are known (token_source 'logprobs'): every token after
    -- the first event gets its event's gap divided by that event's tokens; the mean over
    -- those tokens is the decode span over their number (view token_gaps: per event).
    CASE WHEN len(r.content_event_tokens) >= 2
              AND list_sum(r.content_event_tokens[2:]) > 0 AND r.t_last_ns > r.t_first_ns
              AND r.is_burst IS NOT TRUE
         THEN (r.t_last_ns - r.t_first_ns) / 1e9 / list_sum(r.content_event_tokens[2:])
         END                                                                  AS itl_per_token_s,
    CASE WHEN r.delivered_in_one_read THEN
        'one read: all ' || len(r.content_event_ns) || ' content events arrived in one '
        || 'network read (delivered whole, not streamed): no TTFT, prefill rate, decode '
        || 'rate, TPOT or ITL'
         WHEN r.is_burst THEN
        'burst: ' || (len(r.content_event_ns) - 1) || ' events after the first in '
        || CASE list_unique(list_filter(r.content_event_ns, lambda t: t > r.t_first_ns))
               WHEN 0 THEN 'the first''s read'
               ELSE list_unique(list_filter(r.content_event_ns, lambda t: t > r.t_first_ns))
                    || ' read(s)' END
        || ' within ' || CASE WHEN (r.t_last_ns - r.t_first_ns) >= 1e8
                              THEN format('{:.0f}', (r.t_last_ns - r.t_first_ns) / 1e6)
                              ELSE format('{:.3g}', (r.t_last_ns - r.t_first_ns) / 1e6) END
        || ' ms'
        || CASE WHEN r.span_lag_ms IS NULL THEN ''
                ELSE CASE WHEN r.span_lag_measured THEN ' (client lag during it '
                          ELSE ' (client lag p99 ' END
                     || CASE WHEN r.span_lag_ms >= 100
                             THEN format('{:.0f}', r.span_lag_ms)
                             ELSE format('{:.3g}', r.span_lag_ms) END || ' ms)' END
    END                                                                       AS rate_withheld,
    r.delivered_in_one_read,
    r.has_reasoning,
    r.reasoning_tokens,
    r.reasoning_chunks,
    r.session,
    r.turn,
    r.prefix_group,
    r.requested_input_tokens,
    (r.t_submit_ns - r.t_scheduled_ns) / 1e6                                  AS arrival_lag_ms,
    r.t_scheduled_ns,
    -- what came back (issue #42): digests and lengths always, texts where kept
    r.answer_sha256,
    r.answer_chars,
    r.reasoning_sha256,
    r.reasoning_chars,
    r.answer_text,
    r.reasoning_text,
    r.t_first_reasoning_ns,
    r.t_last_reasoning_ns,
    r.t_submit_ns,
    r.t_first_ns,
    r.t_last_ns,
    r.t_done_ns,
    r.raw_file_sha256
FROM spread AS r;
