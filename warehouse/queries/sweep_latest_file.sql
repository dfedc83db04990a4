-- The sweep file of a sweep's newest run (its text as recorded and that text's sha256):
-- the settings its history is read with (the smallest change of interest) are the newest.
SELECT run_id, sweep_toml, sweep_sha256
FROM runs
WHERE sweep_name = $sweep AND sweep_toml IS NOT NULL
ORDER BY started_at DESC
LIMIT 1;
