-- What the benchledger page says of one run above its verdicts and entries.
SELECT run_id, sweep_name, started_at, ended_at, scheduled_for, evidence, sweep_sha256,
       harness_version
FROM runs
WHERE run_id = $run_id
