-- The sweeps a warehouse holds (the benchledger page in the Airflow UI): how many runs
-- each has, and its newest run with that run's current entries (published, blocked) and
-- its comparisons counted by verdict.
WITH newest AS (
    SELECT sweep_name, count(*) AS runs, arg_max(run_id, started_at) AS run_id,
           max(started_at) AS started_at
    FROM runs
    GROUP BY sweep_name
), counts AS (
    SELECT run_id, count(*) AS entries, count(*) FILTER (WHERE publishable) AS published
    FROM current_entries
    GROUP BY run_id
), verdicts AS (
    SELECT run_id, string_agg(verdict || ': ' || n, ', ' ORDER BY verdict) AS verdicts
    FROM (SELECT run_id, verdict, count(*) AS n FROM comparisons GROUP BY run_id, verdict)
    GROUP BY run_id
)
SELECT n.sweep_name, n.runs, n.run_id AS newest_run_id, n.started_at AS newest_started_at,
       coalesce(c.published, 0) AS published,
       coalesce(c.entries - c.published, 0) AS blocked, v.verdicts
FROM newest AS n
LEFT JOIN counts AS c USING (run_id)
LEFT JOIN verdicts AS v USING (run_id)
ORDER BY n.sweep_name
