-- One row per (window, node, GPU): the GPU's SM clock while under load in that window, as
-- the median of its samples (robust to one sample caught between requests) and as a
-- fraction of the GPU's max SM clock (clock_ratio), which the clock_under_load rule reads
-- to tell a throttled node from a slow arm. Under load: the GPU reported utilisation above
-- 0 (or none at all). Samples come from every node of the deployment (gpu_telemetry), and
-- from the measuring node's clock samples of windows measured before it (node_clocks).
CREATE VIEW window_clocks AS
WITH samples AS (
    SELECT restart_id, window_id, node, gpu, sm_clock_mhz, max_sm_clock_mhz
    FROM node_clocks
    WHERE under_load
    UNION ALL
    SELECT restart_id, window_id, node, gpu, sm_clock_mhz, max_sm_clock_mhz
    FROM gpu_telemetry
    WHERE sm_clock_mhz IS NOT NULL AND (utilization_gpu IS NULL OR utilization_gpu > 0)
)
SELECT restart_id, window_id, node, gpu,
       count(*) AS samples,
       median(sm_clock_mhz) AS median_sm_clock_mhz,
       max(max_sm_clock_mhz) AS max_sm_clock_mhz,
       median(sm_clock_mhz) / nullif(max(max_sm_clock_mhz), 0) AS clock_ratio
FROM samples
GROUP BY ALL;
