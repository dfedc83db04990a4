-- Measured (never warm-up) requests of one run, with their window's labels.
SELECT w.arm, w.workload, w.concurrency, w.window_id, w.restart_id,
       r.request_id, r.status, r.token_source, r.temperature, r.max_tokens,
       r.prompt_tokens, r.output_tokens, r.cached_tokens, r.usage_output_tokens,
       r.ttft_s, r.e2e_s, r.tpot_s, r.decode_tok_s, r.e2e_tok_s, r.prefill_tok_s,
       r.tokens_per_chunk, r.chunks,
       r.t_first_ns, r.t_last_ns, r.raw_file_sha256
FROM requests AS r
JOIN windows AS w USING (window_id)
WHERE w.run_id = $run_id AND NOT r.is_warmup
ORDER BY r.request_id
