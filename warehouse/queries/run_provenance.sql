-- The run itself: its sweep (name, sha256 of the text it ran), the harness version, the
-- kind of evidence, and when it started.
SELECT run_id, sweep_name, sweep_sha256, harness_version, evidence, started_at
FROM runs
WHERE run_id = $run_id
