-- Issue #6: an entry never silently changes value. entry_key names what an entry is (run
-- and labels); entry_id names one derivation of it (its exact inputs). Re-deriving after
-- new data adds a new entry_id under the same key; the old row stays queryable in
-- `entries`, and only the newest derivation of each key counts (and is published if it
-- passed every rule).
ALTER TABLE entries ADD COLUMN entry_key VARCHAR;

-- Which derivation counts is the view current_entries; what is published,
-- published_entries; every derivation, entry_history (all in warehouse/views/).
