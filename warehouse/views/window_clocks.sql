-- One row per (window, node, GPU): the GPU's SM clock while under load in that window, as
-- the median of its samples (robust to one sample caught between requests) and as a
-- fraction of the GPU's max SM clock (clock_ratio), which the clock_under_load rule reads
-- to tell a throttled node from a slow arm.
CREATE VIEW window_clocks AS
SELECT restart_id, window_id, node, gpu,
       count(*) AS samples,
       median(sm_clock_mhz) AS median_sm_clock_mhz,
       max(max_sm_clock_mhz) AS max_sm_clock_mhz,
       median(sm_clock_mhz) / nullif(max(max_sm_clock_mhz), 0) AS clock_ratio
FROM node_clocks
WHERE under_load
GROUP BY ALL;
