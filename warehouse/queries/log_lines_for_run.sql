-- The server log's throughput lines of one run's windows.
SELECT l.restart_id, l.window_id, l.line_no, l.generation_tok_s, l.prompt_tok_s,
       l.accepted_tok_s
FROM server_log_lines AS l
JOIN windows AS w USING (window_id)
WHERE w.run_id = $run_id
ORDER BY l.window_id, l.line_no
