-- The first $limit requests behind one entry (entry_requests expands its per-window
-- lineage), with the raw file each came from; explain_request_count.sql counts them all.
SELECT q.request_id, r.status, r.output_tokens, r.token_source, r.raw_file_sha256
FROM entry_requests AS q
JOIN request_records AS r USING (request_id)
WHERE q.entry_id = $entry_id
ORDER BY q.request_id
LIMIT $limit
