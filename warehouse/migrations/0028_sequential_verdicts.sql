-- Issue #41 item 5: sequential verdicts (docs/protocol.md, "Sequential verdicts").
-- A sequential sweep ([sweep] max_restarts) looks at its comparisons after each block from
-- its minimum restarts on (benchledger/design/sequential.py, warehouse/interim.py).
-- interim_looks: one row per look, comparison (A/B, per workload and load point) and
-- block count, as the DAG's look task saw it (loaded from the run's _looks/ files):
-- blocks: restarts per arm the look rests on; look: its number (1: the first);
-- statistic: Welch's t of b - a over those restart means; df the boundary's degrees of
-- freedom (min(n_a, n_b) - 1, Hsu's conservative choice);
-- z_boundary: the Lan-DeMets O'Brien-Fleming-type boundary on the z scale, boundary the
-- same on the t scale at df (NULL: no error left to spend), nominal_level the two-sided
-- level it holds the look to; crossed: |statistic| >= boundary; control_*: the A/A
-- control's, looked at after the same blocks; decided: this comparison is decided at this
-- look or an earlier one (decided_at_blocks); why: why it could not be judged (a blocked
-- entry, no shared load point); decision: the sweep's, at this look ('stop': every
-- comparison decided, the remaining blocks skipped; 'continue').
CREATE TABLE interim_looks (
    run_id VARCHAR NOT NULL,
    blocks INTEGER NOT NULL,
    look INTEGER,
    max_restarts INTEGER NOT NULL,
    a VARCHAR NOT NULL,
    b VARCHAR NOT NULL,
    control_a VARCHAR,
    control_b VARCHAR,
    workload VARCHAR NOT NULL,
    metric VARCHAR NOT NULL,
    numerator VARCHAR,
    load_point VARCHAR,
    difference DOUBLE,
    statistic DOUBLE,
    df DOUBLE,
    z_boundary DOUBLE,
    boundary DOUBLE,
    nominal_level DOUBLE,
    crossed BOOLEAN,
    control_difference DOUBLE,
    control_statistic DOUBLE,
    control_boundary DOUBLE,
    control_crossed BOOLEAN,
    decided BOOLEAN NOT NULL,
    decided_at_blocks INTEGER,
    why VARCHAR,
    decision VARCHAR NOT NULL,
    looked_at TIMESTAMPTZ NOT NULL
);
-- comparisons of a sequential run: max_restarts; sequential_looks, the looks its restart
-- means allow; decided_at_blocks, the blocks after which a look crossed (NULL: none);
-- sequential_blocks, sequential_difference, sequential_statistic and sequential_boundary,
-- that look's (else the last's).
ALTER TABLE comparisons ADD COLUMN max_restarts INTEGER;
ALTER TABLE comparisons ADD COLUMN sequential_looks INTEGER;
ALTER TABLE comparisons ADD COLUMN decided_at_blocks INTEGER;
ALTER TABLE comparisons ADD COLUMN sequential_blocks INTEGER;
ALTER TABLE comparisons ADD COLUMN sequential_difference DOUBLE;
ALTER TABLE comparisons ADD COLUMN sequential_statistic DOUBLE;
ALTER TABLE comparisons ADD COLUMN sequential_boundary DOUBLE;
