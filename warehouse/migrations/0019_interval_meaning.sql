-- Issue #23, item 5: what a comparison's interval over restart means can decide. `df`
-- (already here) is its Welch-Satterthwaite degrees of freedom. undecided: the A/B's
-- interval over restart means includes 0 (NULL: no interval over restarts, or an A/A
-- control). restarts_to_decide: the restarts per arm at which that interval would exclude
-- 0 if the observed difference and each arm's between-restart spread held
-- (warehouse/compare.py restarts_to_decide; NULL: decided, nothing to estimate from, or
-- more than 1000 per arm).
ALTER TABLE comparisons ADD COLUMN undecided BOOLEAN;
ALTER TABLE comparisons ADD COLUMN restarts_to_decide INTEGER;
