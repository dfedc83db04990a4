-- The requests behind one entry, with the raw file each came from.
SELECT l.request_id, r.status, r.output_tokens, r.token_source, l.raw_file_sha256
FROM entry_lineage AS l
JOIN request_records AS r ON r.request_id = l.request_id
WHERE l.entry_id = $entry_id
ORDER BY l.request_id
