-- Issue #13: how each server was found ready and whose counters it exports. Raw files
-- written before this carry neither: their rows keep NULL (not recorded).

-- The path whose 200 declared the server ready: the arm's health_path, or /v1/models when
-- the health path answered 404 (a server without a health endpoint).
ALTER TABLE restarts ADD COLUMN ready_probe VARCHAR;
-- Whose /metrics names the server exports: vllm | sglang | llamacpp | tgi (the arm's
-- server_family, or recognised from the names when the server was ready); NULL: none
-- recognised (no /metrics, or names of no known family).
ALTER TABLE restarts ADD COLUMN server_family VARCHAR;

-- Which client count a reconciliation row checks, whatever the family calls its counter:
-- generation_tokens | prompt_tokens | finished_requests (the three *_reconcile rules).
ALTER TABLE reconciliations ADD COLUMN quantity VARCHAR;
