-- Each server counter's change over each measured window of one run (all label sets).
SELECT m.window_id, m.name,
       sum(CASE WHEN m.phase = 'after' THEN m.value ELSE -m.value END) AS delta
FROM server_metrics AS m
JOIN windows AS w USING (window_id)
WHERE w.run_id = $run_id AND m.name LIKE '%\_total' ESCAPE '\'
GROUP BY m.window_id, m.name
HAVING count(*) FILTER (WHERE m.phase = 'after') > 0
ORDER BY m.window_id, m.name
