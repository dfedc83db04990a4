-- The sweep file a sweep's history is read with (its text as recorded and that text's
-- sha256): that of run $run_id when one is named (a run's report and gate judge it by its
-- own settings), else that of the sweep's newest run (the terminal's history).
SELECT run_id, sweep_toml, sweep_sha256
FROM runs
WHERE sweep_name = $sweep AND sweep_toml IS NOT NULL
  AND ($run_id IS NULL OR run_id = $run_id)
ORDER BY started_at DESC
LIMIT 1;
