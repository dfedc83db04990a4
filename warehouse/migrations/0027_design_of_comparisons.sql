-- comparisons.verdict gains a word: `underpowered` (a no finding whose restarts could not
-- have detected the comparison's smallest_effect).
-- Issue #41 items 2-3: what each comparison's design could say (warehouse/design.py).
-- restart_order: how its run ordered restarts ("blocked" or "arm_by_arm"; the latter
-- confounds time with the arm). detectable_effect: the smallest true difference (b - a, in
-- the metric's unit) Welch's interval over these restart means would have found with 80%
-- power at 95% confidence; detectable_relative the same over a's mean; smallest_effect
-- the comparison's own smallest relative effect of interest (NULL: none named).
-- paired_*: the within-block analysis (blocks holding both arms), shown beside Welch's,
-- which decides. drift_*: the relative change of restart means over the span the two
-- arms' restarts covered (one slope, a level per arm); a_drift_* and b_drift_*: each
-- arm's own (an interval needs three restarts).
ALTER TABLE comparisons ADD COLUMN restart_order VARCHAR;
ALTER TABLE comparisons ADD COLUMN detectable_effect DOUBLE;
ALTER TABLE comparisons ADD COLUMN detectable_relative DOUBLE;
ALTER TABLE comparisons ADD COLUMN smallest_effect DOUBLE;
ALTER TABLE comparisons ADD COLUMN paired_difference DOUBLE;
ALTER TABLE comparisons ADD COLUMN paired_ci95_low DOUBLE;
ALTER TABLE comparisons ADD COLUMN paired_ci95_high DOUBLE;
ALTER TABLE comparisons ADD COLUMN paired_df DOUBLE;
ALTER TABLE comparisons ADD COLUMN paired_blocks INTEGER;
ALTER TABLE comparisons ADD COLUMN paired_detectable_effect DOUBLE;
ALTER TABLE comparisons ADD COLUMN drift DOUBLE;
ALTER TABLE comparisons ADD COLUMN drift_ci95_low DOUBLE;
ALTER TABLE comparisons ADD COLUMN drift_ci95_high DOUBLE;
ALTER TABLE comparisons ADD COLUMN drift_span_s DOUBLE;
ALTER TABLE comparisons ADD COLUMN a_drift DOUBLE;
ALTER TABLE comparisons ADD COLUMN a_drift_ci95_low DOUBLE;
ALTER TABLE comparisons ADD COLUMN a_drift_ci95_high DOUBLE;
ALTER TABLE comparisons ADD COLUMN b_drift DOUBLE;
ALTER TABLE comparisons ADD COLUMN b_drift_ci95_low DOUBLE;
ALTER TABLE comparisons ADD COLUMN b_drift_ci95_high DOUBLE;
