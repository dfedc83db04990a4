-- The workload behind one entry (issue #26): how its run prepared it (dataset or trace by
-- sha256, rows and format, the ids used, distributions and seed: the provenance JSON), and
-- what its windows asked for against what they got. No row for a built-in prompt set.
SELECT k.kind, k.items, k.seed, k.sampling, k.dataset_path, k.dataset_sha256,
       k.dataset_rows, k.dataset_format, k.trace_path, k.trace_sha256, k.trace_rows,
       k.time_scale, k.turns, k.think_time_s, k.history, k.shared_prefix_groups,
       k.shared_prefix_tokens, k.ids_sha256, k.prepared_sha256, k.provenance
FROM entries AS e
JOIN workloads AS k ON k.run_id = e.run_id AND k.workload = e.workload
WHERE e.entry_id = $entry_id
