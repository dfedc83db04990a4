-- One row per measured window with GPU telemetry: the energy every GPU of the deployment
-- drew over the window, in joules (docs/protocol.md: energy entries). Per GPU, its energy
-- counter's `after` reading minus its `before` reading (the two bracket the window); for a
-- GPU without a counter (a vGPU, an older exporter, nvidia-smi), its power samples
-- integrated over the window by the trapezoid rule, from the `before` to the `after`
-- reading, which energy_source says. span_s: from the earliest `before` to the latest
-- `after` reading (mean power's time).
--
-- A GPU's readings must be able to be true, or it has no energy (issue #39: a page that
-- lies is unreadable, never a value): no negative counter or power reading; a counter that
-- never goes backwards from one reading to the next; that moves at least MIN_GPU_POWER_W
-- (1 W) times the window's seconds (no powered GPU draws less, idle or not: a counter that
-- does not move is frozen, or an exporter's stale cache); that moves at most POWER_HEADROOM
-- (1.25) times its ceiling times the seconds, and power readings at most that; and power
-- samples (where there is no counter) that integrate to at least 1 W over the window. The
-- ceiling is the power limit its telemetry reports (power_limit_w, the largest), never
-- above MAX_GPU_POWER_W (2,000 W, more than any GPU's board limit: a page cannot raise the
-- bound it is checked against), and MAX_GPU_POWER_W where it reports none. The constants
-- are benchledger.rules.core's; tests/unit/test_energy_plausibility.py holds the two equal.
--
-- A window has no energy (NULL, never a partial sum, a zero or an absurd value) where any
-- GPU's readings are implausible, any GPU has neither a counter nor a power at every
-- reading, any GPU its deployment listed when it was ready (restarts.deployment[*].gpus)
-- is not on the window's pages, or any node of the deployment gave no reading at all:
-- energy_gaps says which node and GPU, and what was wrong.
CREATE VIEW window_energy AS
WITH ordered AS (
    SELECT restart_id, window_id, node, gpu, phase, sampled_at, energy_j, power_w,
           power_limit_w,
           epoch(sampled_at) - epoch(lag(sampled_at) OVER gpu_samples) AS dt_s,
           lag(power_w) OVER gpu_samples AS previous_power_w,
           -- the counter's previous reading (a reading without one skipped)
           lag(energy_j IGNORE NULLS) OVER gpu_samples AS previous_energy_j
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
           count(power_w) AS power_samples,
           min(energy_j) AS lowest_j,
           max(previous_energy_j - energy_j) AS largest_drop_j,
           min(power_w) AS lowest_w,
           max(power_w) AS highest_w,
           -- the ceiling (MAX_GPU_POWER_W = 2000) and its allowance (POWER_HEADROOM = 1.25)
           1.25 * least(coalesce(max(power_limit_w) FILTER (WHERE power_limit_w > 0),
                                 2000.0), 2000.0) AS allowed_w
    FROM ordered
    GROUP BY window_id, node, gpu
), spans AS (
    SELECT *,
           epoch(after_at) - epoch(before_at) AS gpu_span_s,
           after_j - before_j AS delta_j,
           before_j IS NOT NULL AND after_j IS NOT NULL AS has_counter,
           before_at IS NOT NULL AND after_at IS NOT NULL AND samples >= 2
               AND power_samples = samples AS has_power
    FROM per_gpu
), judged_gpus AS (
    SELECT *,
           -- what cannot be true of this GPU's readings ('' where nothing)
           concat_ws(', ',
               CASE WHEN lowest_j < 0
                    THEN format('negative energy counter ({:.4g} J)', lowest_j) END,
               CASE WHEN largest_drop_j > 0
                    THEN format('energy counter went backwards (by {:.4g} J)',
                                largest_drop_j) END,
               -- MIN_GPU_POWER_W = 1
               CASE WHEN has_counter AND delta_j >= 0
                         AND (delta_j = 0 OR delta_j < 1.0 * gpu_span_s)
                    THEN format('energy counter frozen ({:.4g} J in {:.3g} s: under 1 W)',
                                delta_j, gpu_span_s) END,
               CASE WHEN has_counter AND delta_j > allowed_w * gpu_span_s
                    THEN format('energy counter jumped ({:.4g} J in {:.3g} s = {:.4g} W, '
                                || 'above {:.4g} W)', delta_j, gpu_span_s,
                                delta_j / nullif(gpu_span_s, 0), allowed_w) END,
               CASE WHEN lowest_w < 0
                    THEN format('negative power reading ({:.4g} W)', lowest_w) END,
               CASE WHEN highest_w > allowed_w
                    THEN format('power reading {:.4g} W above {:.4g} W', highest_w,
                                allowed_w) END,
               CASE WHEN NOT has_counter AND has_power AND lowest_w >= 0
                         AND (integrated_j <= 0 OR integrated_j < 1.0 * gpu_span_s)
                    THEN format('power samples integrate to {:.4g} J in {:.3g} s '
                                || '(under 1 W)', integrated_j, gpu_span_s) END
           ) AS implausible
    FROM spans
), gpu_energy AS (
    SELECT *,
           CASE WHEN implausible = '' AND has_counter THEN delta_j END AS counter_j,
           CASE WHEN implausible = '' AND NOT has_counter AND has_power
                THEN integrated_j END AS power_j
    FROM judged_gpus
), spanned AS (
    SELECT restart_id,
           CAST(json_extract_string(deployment, '$[*].node') AS VARCHAR[]) AS nodes
    FROM restarts
), per_window AS (
    SELECT window_id, any_value(restart_id) AS restart_id,
           count(*) AS gpus,
           count(DISTINCT node) AS nodes,
           list(DISTINCT node) AS nodes_read,
           list(format('{}/gpu{}', node, gpu)) AS gpus_read,
           count(counter_j) AS counter_gpus,
           count(power_j) AS integrated_gpus,
           sum(coalesce(counter_j, power_j)) AS energy_sum_j,
           string_agg(format('{}/gpu{}: {}', node, gpu, implausible), '; '
                      ORDER BY node, gpu) FILTER (WHERE implausible <> '') AS implausible_gpus,
           string_agg(format('{}/gpu{}', node, gpu), ', ' ORDER BY node, gpu)
               FILTER (WHERE implausible = '' AND counter_j IS NULL AND power_j IS NULL)
               AS unmeasured_gpus,
           epoch(max(after_at)) - epoch(min(before_at)) AS span_s
    FROM gpu_energy
    GROUP BY window_id
), judged AS (
    SELECT w.*,
           array_to_string(list_filter(coalesce(s.nodes, []::VARCHAR[]),
                                       lambda n: NOT list_contains(w.nodes_read, n)),
                           ', ') AS unread_nodes,
           -- listed GPUs of the nodes that were read (an unread node is named as one)
           (SELECT string_agg(format('{}/gpu{}', l.node, l.gpu), ', ' ORDER BY l.node, l.gpu)
            FROM deployment_gpus AS l
            WHERE l.restart_id = w.restart_id AND list_contains(w.nodes_read, l.node)
              AND NOT list_contains(w.gpus_read, format('{}/gpu{}', l.node, l.gpu)))
               AS unlisted_gpus
    FROM per_window AS w
    LEFT JOIN spanned AS s USING (restart_id)
), readable AS (
    SELECT *,
           implausible_gpus IS NULL AND unmeasured_gpus IS NULL AND unread_nodes = ''
               AND unlisted_gpus IS NULL AS whole
    FROM judged
)
SELECT window_id, restart_id, gpus, nodes, counter_gpus, integrated_gpus, span_s,
       CASE WHEN whole THEN energy_sum_j END AS energy_j,
       -- the kinds entries carry as their energy_source (rule energy_source_labelled);
       -- counter_gpus and integrated_gpus say how many GPUs each covered
       CASE WHEN NOT whole THEN NULL
            WHEN integrated_gpus = 0 THEN 'energy counter'
            WHEN counter_gpus = 0 THEN 'integrated power samples'
            ELSE 'energy counter + integrated power samples'
       END AS energy_source,
       concat_ws('; ',
                 CASE WHEN implausible_gpus IS NOT NULL
                      THEN 'readings that cannot be true: ' || implausible_gpus END,
                 CASE WHEN unmeasured_gpus IS NOT NULL
                      THEN 'no energy counter or power samples over the window: '
                           || unmeasured_gpus END,
                 CASE WHEN unlisted_gpus IS NOT NULL
                      THEN 'listed when the deployment was ready, not on the window''s '
                           || 'pages: ' || unlisted_gpus END,
                 CASE WHEN unread_nodes <> ''
                      THEN 'no telemetry from node ' || unread_nodes END) AS energy_gaps
FROM readable;
