-- The measured requests of the windows derivation uses (`derive_windows`: window_id,
-- restart_id, cell), as benchledger/slo_judge.sql reads them (`slo_requests`).
CREATE OR REPLACE TEMP VIEW slo_requests AS
SELECT d.cell, r.window_id, r.request_id, r.status, r.output_tokens, r.t_submit_ns,
       r.t_first_ns, r.t_last_ns, r.t_done_ns, r.t_first_reasoning_ns,
       r.t_last_reasoning_ns, r.content_event_ns
FROM derive_windows AS d
JOIN request_records AS r ON r.window_id = d.window_id AND NOT r.is_warmup
