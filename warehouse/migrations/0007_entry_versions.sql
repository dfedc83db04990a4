-- Issue #6: an entry never silently changes value. entry_key names what an entry is (run
-- and labels); entry_id names one derivation of it (its exact inputs). Re-deriving after
-- new data adds a new entry_id under the same key; the old row stays queryable in
-- `entries`, and only the newest derivation of each key counts (and is published if it
-- passed every rule).
ALTER TABLE entries ADD COLUMN entry_key VARCHAR;

CREATE VIEW current_entries AS
SELECT * EXCLUDE (entry_key)
FROM entries
QUALIFY row_number() OVER (PARTITION BY coalesce(entry_key, entry_id)
                           ORDER BY derived_at DESC, entry_id) = 1;

CREATE OR REPLACE VIEW published_entries AS
SELECT * FROM current_entries WHERE publishable;

-- Every derivation of an entry, newest first: what a number was, and when it changed.
CREATE VIEW entry_history AS
SELECT entry_key, entry_id, run_id, arm, workload, metric, statistic, scope, concurrency,
       value, publishable, derived_at,
       row_number() OVER (PARTITION BY entry_key ORDER BY derived_at DESC, entry_id) = 1
           AS is_current
FROM entries;

CREATE OR REPLACE VIEW variance_report AS
SELECT e.run_id, e.arm, e.workload, e.metric, e.scope, e.concurrency,
       count(*)                              AS n_restarts,
       sum(m.n_requests)                     AS n_requests,
       avg(m.sd / nullif(m.mean, 0))         AS cv_within_restarts,
       stddev_samp(m.mean) / nullif(avg(m.mean), 0) AS cv_between_restarts
FROM current_entries AS e
JOIN entry_restart_means AS m USING (entry_id)
WHERE e.statistic = 'mean' AND e.scope IN ('single_stream', 'per_user')
GROUP BY ALL;
