-- Every raw file of one run, as the loader recorded it: the files under the run's folder
-- (its manifest, the restart and window manifests, the requests, observations and
-- telemetry files, and superseded versions of a retried step), by kind and path within the
-- run's folder: the one its restart manifests sit in (<run>/<arm>/r<k>/restart.json).
WITH folders AS (
    SELECT DISTINCT regexp_extract(f.path, '^(.*)/[^/]+/r[0-9]+/[^/]+$', 1) AS folder
    FROM restarts AS r
    JOIN raw_files AS f ON f.sha256 = r.raw_file_sha256
    WHERE r.run_id = $run_id
)
SELECT f.kind, f.sha256, f.rows, substr(f.path, length(d.folder) + 2) AS name
FROM raw_files AS f
JOIN folders AS d ON starts_with(f.path, d.folder || '/')
WHERE d.folder <> ''
ORDER BY f.kind, name, f.sha256
