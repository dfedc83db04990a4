-- A few prompts of each workload of one run, for the report to show what was sent: at most
-- $per_workload distinct prompts per workload, from the measured requests of windows a
-- published entry rests on, chosen by the hash of the prompt id (the same on every
-- export), each with one request's lengths and its window's prompt set (a built-in set's
-- text is in benchledger/prompts; other workloads' text is in the prepared file only).
WITH shown AS (
    SELECT DISTINCT l.window_id
    FROM entry_lineage AS l
    JOIN published_entries AS p USING (entry_id)
    WHERE p.run_id = $run_id AND l.window_id IS NOT NULL
), prompts AS (
    SELECT w.workload, w.prompt_set, w.workload_kind, r.prompt_id, r.prompt_prefix,
           r.requested_input_tokens, r.prompt_tokens, r.max_tokens, r.output_tokens
    FROM windows AS w
    JOIN shown USING (window_id)
    JOIN request_records AS r ON r.window_id = w.window_id
    WHERE w.run_id = $run_id AND NOT r.is_warmup
    QUALIFY row_number() OVER (PARTITION BY w.workload, r.prompt_id
                               ORDER BY r.request_id) = 1
)
SELECT *
FROM prompts
QUALIFY row_number() OVER (PARTITION BY workload ORDER BY hash(prompt_id), prompt_id)
        <= $per_workload
ORDER BY workload, hash(prompt_id), prompt_id
