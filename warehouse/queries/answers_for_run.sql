-- Issue #42: what each arm answered to each prompt of a workload, for the equivalence of two
-- arms (warehouse/equivalence.py). A prompt is the text actually sent (prompt_sha256: cold
-- prompts' unique prefixes make every request its own prompt, shared by no other arm). Per
-- arm, workload and prompt: its most frequent answer among completed measured requests (ties
-- to the smaller digest, so the choice is the same every time), how many distinct answers the
-- arm gave it (more than one at temperature 0: the server is not deterministic), and the
-- answer's text where the sweep kept it (keep_output_text), for the first divergent position.
WITH answers AS (
    SELECT w.arm, w.workload, r.prompt_sha256, r.answer_sha256,
           min(r.prompt_id) AS prompt_id, any_value(r.answer_text) AS answer_text,
           count(*) AS n
    FROM request_records AS r
    JOIN windows AS w USING (window_id)
    WHERE w.run_id = $run_id AND NOT r.is_warmup AND r.status = 'completed'
      AND r.answer_sha256 IS NOT NULL
    GROUP BY ALL
), ranked AS (
    SELECT *,
           row_number() OVER (PARTITION BY arm, workload, prompt_sha256
                              ORDER BY n DESC, answer_sha256) AS rank,
           count(*) OVER (PARTITION BY arm, workload, prompt_sha256) AS distinct_answers
    FROM answers
)
SELECT arm, workload, prompt_sha256, prompt_id, answer_sha256, answer_text, distinct_answers
FROM ranked
WHERE rank = 1
ORDER BY arm, workload, prompt_id, prompt_sha256
