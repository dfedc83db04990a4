-- The windows one entry rests on, each with its restart: where the number came from.
-- (Lineage rows from before per-window lineage name requests; their windows count too.
-- Imported evidence has windows without a measured restart.)
WITH entry_windows AS (
    SELECT l.window_id
    FROM entry_lineage AS l
    WHERE l.entry_id = $entry_id AND l.window_id IS NOT NULL
    UNION
    SELECT q.window_id
    FROM entry_lineage AS l
    JOIN request_records AS q ON q.request_id = l.request_id
    WHERE l.entry_id = $entry_id
)
SELECT w.window_id, w.arm, s.restart_index, s.status AS restart_status, w.worker_hostname,
       w.load_point, w.submitted, w.completed, w.failed, w.unresolved, w.drain_status,
       w.attempt, w.window_start
FROM windows AS w
JOIN entry_windows USING (window_id)
LEFT JOIN restarts AS s USING (restart_id)
ORDER BY s.restart_index, w.window_id
