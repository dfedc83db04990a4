-- One row per measured window with GPU telemetry: the energy every GPU of the deployment
-- drew over the window, in joules (docs/protocol.md: energy entries). Per GPU, its energy
-- counter's `after` reading minus its `before` reading (the two bracket the window); for a
-- GPU without a counter (a vGPU, an older exporter), or whose counter went backwards (a
-- driver reload), its power samples integrated over the window by the trapezoid rule,
-- from the `before` to the `after` reading, which energy_source says. A window where any
-- GPU has neither, or any node of the deployment (restarts.deployment) gave no reading at
-- both ends, has no energy (NULL, never a partial sum or a zero): energy_gaps says which.
-- span_s: from the earliest `before` to the latest `after` reading (mean power's time).
CREATE VIEW window_energy AS
WITH ordered AS (
    SELECT restart_id, window_id, node, gpu, phase, sampled_at, energy_j, power_w,
           epoch(sampled_at) - epoch(lag(sampled_at) OVER gpu_samples) AS dt_s,
           lag(power_w) OVER gpu_samples AS previous_power_w
    FROM gpu_telemetry
    -- restart_id and window_id partition it, so a filter on either reaches the table
    WINDOW gpu_samples AS (PARTITION BY restart_id, window_id, node, gpu ORDER BY sampled_at)
), per_gpu AS (
    SELECT window_id, any_value(restart_id) AS restart_id, node, gpu,
           max(energy_j) FILTER (WHERE phase = 'before') AS before_j,
           max(energy_j) FILTER (WHERE phase = 'after') AS after_j,
           min(sampled_at) FILTER (WHERE phase = 'before') AS before_at,
           max(sampled_at) FILTER (WHERE phase = 'after') AS after_at,
           sum(dt_s * (power_w + previous_power_w) / 2) AS integrated_j,
           count(*) AS samples,
           count(power_w) AS power_samples
    FROM ordered
    GROUP BY window_id, node, gpu
), gpu_energy AS (
    SELECT *,
           CASE WHEN after_j >= before_j THEN after_j - before_j END AS counter_j,
           CASE WHEN NOT (after_j >= before_j) OR after_j IS NULL OR before_j IS NULL
                THEN CASE WHEN before_at IS NOT NULL AND after_at IS NOT NULL
                               AND samples >= 2 AND power_samples = samples
                          THEN integrated_j END
           END AS power_j
    FROM per_gpu
), spanned AS (
    SELECT restart_id,
           CAST(json_extract_string(deployment, '$[*].node') AS VARCHAR[]) AS nodes
    FROM restarts
), per_window AS (
    SELECT window_id, any_value(restart_id) AS restart_id,
           count(*) AS gpus,
           count(DISTINCT node) AS nodes,
           list(DISTINCT node) AS nodes_read,
           count(counter_j) AS counter_gpus,
           count(power_j) AS integrated_gpus,
           sum(coalesce(counter_j, power_j)) AS energy_sum_j,
           string_agg(format('{}/gpu{}', node, gpu), ', ' ORDER BY node, gpu)
               FILTER (WHERE counter_j IS NULL AND power_j IS NULL) AS unmeasured_gpus,
           epoch(max(after_at)) - epoch(min(before_at)) AS span_s
    FROM gpu_energy
    GROUP BY window_id
), judged AS (
    SELECT w.*,
           array_to_string(list_filter(coalesce(s.nodes, []::VARCHAR[]),
                                       lambda n: NOT list_contains(w.nodes_read, n)),
                           ', ') AS unread_nodes
    FROM per_window AS w
    LEFT JOIN spanned AS s USING (restart_id)
)
SELECT window_id, restart_id, gpus, nodes, counter_gpus, integrated_gpus, span_s,
       CASE WHEN unmeasured_gpus IS NULL AND unread_nodes = '' THEN energy_sum_j
       END AS energy_j,
       -- the kinds entries carry as their energy_source (rule energy_source_labelled);
       -- counter_gpus and integrated_gpus say how many GPUs each covered
       CASE WHEN unmeasured_gpus IS NOT NULL OR unread_nodes <> '' THEN NULL
            WHEN integrated_gpus = 0 THEN 'energy counter'
            WHEN counter_gpus = 0 THEN 'integrated power samples'
            ELSE 'energy counter + integrated power samples'
       END AS energy_source,
       concat_ws('; ',
                 CASE WHEN unmeasured_gpus IS NOT NULL
                      THEN 'no energy counter or power samples over the window: '
                           || unmeasured_gpus END,
                 CASE WHEN unread_nodes <> ''
                      THEN 'no telemetry from node ' || unread_nodes END) AS energy_gaps
FROM judged;
