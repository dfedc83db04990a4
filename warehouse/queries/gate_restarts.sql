-- Restarts of one run, as the GX gate's "restarts" suite sees them: status, and the
-- worst GPU's median SM clock under load over all the restart's windows.
WITH clocks AS (
    SELECT c.restart_id,
           min(c.clock_ratio) AS clock_ratio,
           arg_min(format('GPU {} on {}: median {} of {} MHz under load = {} of max '
                          '({} samples)',
                          c.gpu, c.node, round(c.median_sm_clock_mhz)::BIGINT,
                          round(c.max_sm_clock_mhz)::BIGINT, round(c.clock_ratio, 3),
                          c.samples),
                   c.clock_ratio) AS clock_detail
    FROM window_clocks AS c
    GROUP BY c.restart_id
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
       c.clock_ratio, t.min_clock_ratio, t.require_clock_check,
       coalesce(c.clock_detail,
                'unchecked: no clock sample under load (source ' || coalesce(t.clock_source, '?')
                || coalesce('; ' || t.errors, '') || ')') AS clock_detail
FROM restarts AS r
LEFT JOIN clocks AS c USING (restart_id)
LEFT JOIN thresholds AS t USING (restart_id)
WHERE r.run_id = $run_id
ORDER BY r.restart_id
