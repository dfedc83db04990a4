-- One row per derivation of an entry (every entry_id under its entry_key), is_current on
-- the newest: what a number was, and when it changed. Reads `entries`, superseded rows
-- included, because the history is the point.
CREATE VIEW entry_history AS
SELECT entry_key, entry_id, run_id, arm, workload, metric, statistic, scope, concurrency,
       value, publishable, derived_at,
       row_number() OVER (PARTITION BY entry_key ORDER BY derived_at DESC, entry_id) = 1
           AS is_current
FROM entries;
