-- Restarts of one run, as the GX gate's "restarts" suite sees them: status, and the worst
-- GPU's median SM clock under load over all the restart's windows, over every node its
-- deployment spanned (restarts.deployment; T10). A node of the deployment without a single
-- GPU sample under load, or a GPU whose maximum clock no source reported, leaves the
-- restart unchecked (clock_ratio NULL, which fails unless require_clock_check = false),
-- unless a GPU that was read already fails: a throttled GPU fails whatever else is missing.
-- So does a GPU the deployment listed when it was ready (restarts.deployment[*].gpus) that
-- is absent from a window's telemetry (issue #39: a page that stops listing a GPU must not
-- pass the restart on the GPUs it still shows); an idle GPU on the page is not absent.
WITH clocks AS (
    SELECT c.restart_id,
           min(c.clock_ratio) AS clock_ratio,
           arg_min(format('{}/gpu{} median {} MHz of {} = {} ({} samples under load)',
                          c.node, c.gpu, round(c.median_sm_clock_mhz)::BIGINT,
                          round(c.max_sm_clock_mhz)::BIGINT, round(c.clock_ratio, 3),
                          c.samples),
                   c.clock_ratio) AS clock_detail,
           list(DISTINCT c.node) FILTER (WHERE c.clock_ratio IS NOT NULL) AS checked_nodes,
           string_agg(DISTINCT format('{}/gpu{}', c.node, c.gpu), ', '
                      ORDER BY format('{}/gpu{}', c.node, c.gpu))
               FILTER (WHERE c.clock_ratio IS NULL) AS without_max_clock
    FROM window_clocks AS c
    WHERE c.restart_id IN (SELECT restart_id FROM restarts WHERE run_id = $run_id)
    GROUP BY c.restart_id
), spanned AS (
    -- NULL for restarts recorded before deployments were: the nodes read are the nodes
    SELECT restart_id,
           CAST(json_extract_string(deployment, '$[*].node') AS VARCHAR[]) AS nodes
    FROM restarts
    WHERE run_id = $run_id
), unread AS (
    SELECT s.restart_id,
           array_to_string(list_filter(s.nodes, lambda n: NOT list_contains(
               coalesce(c.checked_nodes, []::VARCHAR[]), n)), ', ') AS nodes
    FROM spanned AS s
    LEFT JOIN clocks AS c USING (restart_id)
), listed AS (
    SELECT restart_id, node, gpu FROM deployment_gpus WHERE run_id = $run_id
), seen AS (
    SELECT DISTINCT window_id, node, gpu
    FROM gpu_telemetry
    WHERE restart_id IN (SELECT restart_id FROM restarts WHERE run_id = $run_id)
), absent AS (
    -- per restart: each listed GPU missing from some window's telemetry, with how many of
    -- the restart's windows it is missing from
    SELECT restart_id,
           string_agg(format('{}/gpu{} ({} of {} windows)', node, gpu, missing, n_windows),
                      ', ' ORDER BY node, gpu) AS gpus
    FROM (SELECT l.restart_id, l.node, l.gpu,
                 count(*) FILTER (WHERE s.gpu IS NULL) AS missing, count(*) AS n_windows
          FROM listed AS l
          JOIN windows AS w ON w.restart_id = l.restart_id AND w.run_id = $run_id
          LEFT JOIN seen AS s
                 ON s.window_id = w.window_id AND s.node = l.node AND s.gpu = l.gpu
          GROUP BY l.restart_id, l.node, l.gpu)
    WHERE missing > 0
    GROUP BY restart_id
), thresholds AS (
    SELECT restart_id,
           max(min_clock_ratio) AS min_clock_ratio,
           bool_and(require_clock_check) AS require_clock_check,
           max(clock_source) AS clock_source,
           string_agg(DISTINCT observation_errors, '; ') AS errors
    FROM windows
    WHERE run_id = $run_id
    GROUP BY restart_id
)
SELECT r.restart_id, r.arm, r.status,
       CASE WHEN coalesce(u.nodes, '') = '' AND c.without_max_clock IS NULL
                 AND a.gpus IS NULL
                THEN c.clock_ratio
            WHEN c.clock_ratio < t.min_clock_ratio THEN c.clock_ratio
       END AS clock_ratio,
       t.min_clock_ratio, t.require_clock_check,
       CASE WHEN c.clock_detail IS NULL AND coalesce(u.nodes, '') = ''
                AND c.without_max_clock IS NULL AND a.gpus IS NULL
            THEN 'unchecked: no clock sample under load (source '
                 || coalesce(t.clock_source, '?') || coalesce('; ' || t.errors, '') || ')'
            ELSE concat_ws('; ', c.clock_detail,
                           CASE WHEN coalesce(u.nodes, '') <> ''
                                THEN 'unchecked: no GPU sample under load from node '
                                     || u.nodes || ' (source '
                                     || coalesce(t.clock_source, '?')
                                     || coalesce('; ' || t.errors, '') || ')' END,
                           CASE WHEN c.without_max_clock IS NOT NULL
                                THEN 'unchecked: no maximum SM clock reported for '
                                     || c.without_max_clock || ' (dcgm-exporter: add '
                                     || 'DCGM_FI_DEV_MAX_SM_CLOCK to its counters)' END,
                           CASE WHEN a.gpus IS NOT NULL
                                THEN 'unchecked: listed when the deployment was ready, '
                                     || 'absent from the telemetry of a window: ' || a.gpus
                                     || ' (source ' || coalesce(t.clock_source, '?') || ')'
                                END)
       END AS clock_detail
FROM restarts AS r
LEFT JOIN clocks AS c USING (restart_id)
LEFT JOIN unread AS u USING (restart_id)
LEFT JOIN absent AS a USING (restart_id)
LEFT JOIN thresholds AS t USING (restart_id)
WHERE r.run_id = $run_id
ORDER BY r.restart_id
