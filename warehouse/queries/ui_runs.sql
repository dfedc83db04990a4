-- A warehouse's runs for the benchledger page in the Airflow UI: one sweep's, or every
-- sweep's where $sweep_name is NULL; newest first within a sweep. Each with its current
-- entries (published, blocked), its comparisons counted by verdict, how many runs its
-- sweep has, and its place among them (newest_first = 1: the sweep's newest run, the row
-- the list of sweeps shows, the only row of each sweep where $newest_only). $limit rows
-- from $offset ($limit NULL: all): a sweep scheduled every hour has thousands of runs.
WITH counts AS (
    SELECT run_id, count(*) AS entries, count(*) FILTER (WHERE publishable) AS published
    FROM current_entries
    GROUP BY run_id
), verdicts AS (
    SELECT run_id, string_agg(verdict || ': ' || n, ', ' ORDER BY verdict) AS verdicts
    FROM (SELECT run_id, verdict, count(*) AS n FROM comparisons GROUP BY run_id, verdict)
    GROUP BY run_id
)
SELECT r.sweep_name, r.run_id, r.started_at, r.ended_at, r.scheduled_for, r.evidence,
       coalesce(c.published, 0) AS published,
       coalesce(c.entries - c.published, 0) AS blocked, v.verdicts,
       count(*) OVER (PARTITION BY r.sweep_name) AS sweep_runs,
       row_number() OVER (PARTITION BY r.sweep_name
                          ORDER BY r.started_at DESC, r.run_id) AS newest_first
FROM runs AS r
LEFT JOIN counts AS c USING (run_id)
LEFT JOIN verdicts AS v USING (run_id)
WHERE $sweep_name IS NULL OR r.sweep_name = $sweep_name
QUALIFY NOT $newest_only OR newest_first = 1
ORDER BY r.sweep_name, r.started_at DESC, r.run_id
LIMIT $limit OFFSET $offset
