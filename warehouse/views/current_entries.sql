-- One row per entry_key (what an entry is: its run and labels): the newest derivation of
-- it. An entry never silently changes value: re-deriving after new data adds an entry_id
-- under the same key and the old row stays in `entries`, so only this view says which
-- derivation counts. Rows from before entry_key existed are keyed by their entry_id.
CREATE VIEW current_entries AS
SELECT * EXCLUDE (entry_key)
FROM entries
QUALIFY row_number() OVER (PARTITION BY coalesce(entry_key, entry_id)
                           ORDER BY derived_at DESC, entry_id) = 1;
