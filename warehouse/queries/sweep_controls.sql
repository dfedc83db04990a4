-- Each run of one sweep and the A/A control pairs its comparisons name (both arms run one
-- configuration under two names): the history holds a run-to-run change to what these
-- pairs show within a run. A run without a row here had no control.
SELECT DISTINCT c.run_id, c.control_a, c.control_b
FROM comparisons c
JOIN runs r USING (run_id)
WHERE r.sweep_name = $sweep AND c.control_a IS NOT NULL AND c.control_b IS NOT NULL
ORDER BY c.run_id, c.control_a, c.control_b;
