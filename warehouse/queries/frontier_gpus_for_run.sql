-- The GPUs of each arm's deployment, as its telemetry listed them (every node, every GPU):
-- per arm the count when all its restarts listed the same number, else NULL (unknown or
-- disagreeing: no per-GPU figure is made of it). An arm without telemetry has no row.
WITH per_restart AS (
    SELECT r.arm, t.restart_id, count(DISTINCT (t.node, t.gpu)) AS gpus
    FROM gpu_telemetry AS t
    JOIN restarts AS r ON r.restart_id = t.restart_id
    WHERE r.run_id = $run_id
    GROUP BY r.arm, t.restart_id
)
SELECT arm, CASE WHEN min(gpus) = max(gpus) THEN min(gpus) END AS gpus
FROM per_restart
GROUP BY arm
