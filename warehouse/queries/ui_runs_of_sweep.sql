-- One sweep's runs, newest first (the benchledger page in the Airflow UI), each with its
-- current entries (published, blocked) and its comparisons counted by verdict.
WITH counts AS (
    SELECT run_id, count(*) AS entries, count(*) FILTER (WHERE publishable) AS published
    FROM current_entries
    GROUP BY run_id
), verdicts AS (
    SELECT run_id, string_agg(verdict || ': ' || n, ', ' ORDER BY verdict) AS verdicts
    FROM (SELECT run_id, verdict, count(*) AS n FROM comparisons GROUP BY run_id, verdict)
    GROUP BY run_id
)
SELECT r.run_id, r.started_at, r.ended_at, r.scheduled_for, r.evidence,
       coalesce(c.published, 0) AS published,
       coalesce(c.entries - c.published, 0) AS blocked, v.verdicts
FROM runs AS r
LEFT JOIN counts AS c USING (run_id)
LEFT JOIN verdicts AS v USING (run_id)
WHERE r.sweep_name = $sweep_name
ORDER BY r.started_at DESC, r.run_id
