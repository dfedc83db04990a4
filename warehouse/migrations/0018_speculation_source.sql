-- Issue #23, item 2: speculation from evidence. Where an entry's speculation came from:
-- 'declared' (the sweep says its arm speculates: `speculative`, or the simulator's own
-- setting), 'observed: counters' (the server's spec-decode counters moved during one of
-- its windows) or 'observed: chunks' (its streams carried clearly more than one token per
-- content event); NULL: neither declared nor observed. Observed speculation applies the
-- speculative n floor (rule n_at_least_min, T4) whatever the sweep says (the view
-- window_speculation holds the evidence per window). NULL for entries derived before.
ALTER TABLE entries ADD COLUMN speculation_source VARCHAR;
