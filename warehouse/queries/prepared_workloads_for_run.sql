-- Each prepared workload of one run (a dataset, synthetic lengths, sessions, a trace: not a
-- built-in prompt set) with what its prompts' text is made from: the prepared file's name
-- and sha256 (in the run folder), the workload's seed and shared prefix, and where one of
-- the run's restart manifests was loaded from (the run folder is two folders above it,
-- benchledger.raw.layout.RunLayout). The report renders a few of its prompts from that file.
SELECT w.workload, w.prepared_file, w.prepared_sha256, w.seed, w.shared_prefix_tokens,
       (SELECT f.path
        FROM restarts AS r
        JOIN raw_files AS f ON f.sha256 = r.raw_file_sha256
        WHERE r.run_id = $run_id
        ORDER BY r.restart_id
        LIMIT 1) AS restart_manifest_path
FROM workloads AS w
WHERE w.run_id = $run_id AND w.prepared_file IS NOT NULL
ORDER BY w.workload;
