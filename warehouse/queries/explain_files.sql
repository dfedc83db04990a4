-- The raw files behind one entry: its windows' requests Parquet files and manifests, and
-- their GPU telemetry files (the clock check every entry passed; an energy entry's joules).
-- (Lineage rows from before per-window lineage name requests; their windows count too.)
WITH entry_windows AS (
    SELECT l.window_id
    FROM entry_lineage AS l
    WHERE l.entry_id = $entry_id AND l.window_id IS NOT NULL
    UNION
    SELECT r.window_id
    FROM entry_lineage AS l
    JOIN request_records AS r ON r.request_id = l.request_id
    WHERE l.entry_id = $entry_id
), files AS (
    SELECT l.raw_file_sha256 AS sha256
    FROM entry_lineage AS l
    WHERE l.entry_id = $entry_id AND l.raw_file_sha256 IS NOT NULL
    UNION
    SELECT w.raw_file_sha256
    FROM windows AS w
    JOIN entry_windows USING (window_id)
    UNION
    SELECT w.telemetry_file_sha256
    FROM windows AS w
    JOIN entry_windows USING (window_id)
    WHERE w.telemetry_file_sha256 IS NOT NULL
)
SELECT f.sha256, f.kind, f.rows, f.path
FROM raw_files AS f
WHERE f.sha256 IN (SELECT sha256 FROM files)
ORDER BY f.kind, f.path
