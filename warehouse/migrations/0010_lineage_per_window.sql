-- Issue #10: lineage per window, not per request. An entry's lineage rows name the windows
-- it rests on (with their requests file's sha256) and which of their requests count; the
-- view entry_requests expands them to requests on demand, so storage grows with windows,
-- not with entries x requests. Rows written before this migration name one request each
-- (request_id) and keep working.
ALTER TABLE entry_lineage ADD COLUMN window_id VARCHAR;
-- The `requests` view column a completed measured request of the window must have (not
-- NULL) to count for the entry, e.g. decode_tok_s; NULL: every completed measured request.
ALTER TABLE entry_lineage ADD COLUMN request_metric VARCHAR;
