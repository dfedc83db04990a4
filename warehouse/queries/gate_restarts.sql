-- Restarts of one run, as the GX gate's "restarts" suite sees them: status, and the worst
-- GPU's median SM clock under load over all the restart's windows, over every node its
-- deployment spanned (restarts.deployment; T10). A node of the deployment without a single
-- GPU sample under load, or a GPU whose maximum clock no source reported, leaves the
-- restart unchecked (clock_ratio NULL, which fails unless require_clock_check = false),
-- unless a GPU that was read already fails: a throttled GPU fails whatever else is missing.
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
                THEN c.clock_ratio
            WHEN c.clock_ratio < t.min_clock_ratio THEN c.clock_ratio
       END AS clock_ratio,
       t.min_clock_ratio, t.require_clock_check,
       CASE WHEN c.clock_detail IS NULL AND coalesce(u.nodes, '') = ''
                AND c.without_max_clock IS NULL
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
                                     || 'DCGM_FI_DEV_MAX_SM_CLOCK to its counters)' END)
       END AS clock_detail
FROM restarts AS r
LEFT JOIN clocks AS c USING (restart_id)
LEFT JOIN unread AS u USING (restart_id)
LEFT JOIN thresholds AS t USING (restart_id)
WHERE r.run_id = $run_id
ORDER BY r.restart_id
