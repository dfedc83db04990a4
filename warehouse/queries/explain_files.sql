-- The raw files behind one entry: its requests' Parquet files and their windows' manifests.
WITH request_files AS (
    SELECT DISTINCT l.raw_file_sha256 AS sha256
    FROM entry_lineage AS l
    WHERE l.entry_id = $entry_id AND l.raw_file_sha256 IS NOT NULL
), window_files AS (
    SELECT DISTINCT w.raw_file_sha256 AS sha256
    FROM entry_lineage AS l
    JOIN request_records AS r ON r.request_id = l.request_id
    JOIN windows AS w ON w.window_id = r.window_id
    WHERE l.entry_id = $entry_id
)
SELECT f.sha256, f.kind, f.rows, f.path
FROM raw_files AS f
WHERE f.sha256 IN (SELECT sha256 FROM request_files UNION SELECT sha256 FROM window_files)
ORDER BY f.kind, f.path
