-- The run itself: its sweep (name, sha256 of the text it ran), the harness version, the
-- kind of evidence, when it started and ended, and the slot it was scheduled for (the
-- report's provenance and the benchledger page's run header).
SELECT run_id, sweep_name, sweep_sha256, harness_version, evidence, started_at, ended_at,
       scheduled_for
FROM runs
WHERE run_id = $run_id
