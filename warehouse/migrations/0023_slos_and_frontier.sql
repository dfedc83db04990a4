-- Issue #27: SLOs, goodput, load ladders and the throughput-interactivity frontier.
--
-- A window is measured at a load point: its concurrency and, on a rate ladder, its
-- requested rate ('c8', 'c64-r2.5'). Windows measured before load points have none: their
-- point is 'c' || concurrency (queries coalesce it). Entries and comparisons name theirs.
ALTER TABLE windows ADD COLUMN load_point VARCHAR;
ALTER TABLE entries ADD COLUMN load_point VARCHAR;
ALTER TABLE comparisons ADD COLUMN load_point VARCHAR;
ALTER TABLE comparisons ADD COLUMN rate_rps DOUBLE;

-- One row per (run, arm, workload, load point): the frontier's points, each from the
-- run's current entries (warehouse/frontier.py): per-user decode tok/s (the request-level
-- mean, its restart-level interval) against aggregate output tok/s (window throughput,
-- its restart-level interval), per GPU where the arm's restarts agree on the GPU count,
-- with the load's SLO attainment and whether it is sustained or saturated.
CREATE TABLE frontier (
    frontier_id            VARCHAR PRIMARY KEY,
    run_id                 VARCHAR NOT NULL,
    arm                    VARCHAR NOT NULL,
    workload               VARCHAR NOT NULL,
    load_point             VARCHAR NOT NULL,
    concurrency            INTEGER NOT NULL,
    requested_rate_rps     DOUBLE,
    achieved_rate_rps      DOUBLE,
    schedule_kept          DOUBLE,          -- the schedule's span / the submissions' span
    queue_growth           DOUBLE,          -- first-token wait, last third / first third
    numerator              VARCHAR,         -- output_tokens | answer_tokens (reasoning)
    per_user_tok_s         DOUBLE,          -- x: mean decode tok/s of a request
    per_user_low           DOUBLE,          -- restart-level 95% interval
    per_user_high          DOUBLE,
    throughput_tok_s       DOUBLE,          -- y: output tok/s of the whole deployment
    throughput_low         DOUBLE,
    throughput_high        DOUBLE,
    gpus                   INTEGER,         -- NULL: not known (or its restarts disagree)
    throughput_per_gpu_tok_s DOUBLE,
    throughput_per_gpu_low DOUBLE,
    throughput_per_gpu_high DOUBLE,
    attainment             DOUBLE,          -- share of submitted requests meeting every SLO
    attainment_low         DOUBLE,
    attainment_high        DOUBLE,
    goodput_tok_s          DOUBLE,
    n_restarts             INTEGER,
    publishable            BOOLEAN NOT NULL, -- both axes' entries publishable
    meets_target           BOOLEAN,         -- NULL: the sweep has no SLO for the workload
    saturated              BOOLEAN NOT NULL,
    saturation_reason      VARCHAR,
    sustained              BOOLEAN NOT NULL, -- the arm's highest load meeting the target
    per_user_entry_id      VARCHAR,
    throughput_entry_id    VARCHAR,
    attainment_entry_id    VARCHAR,
    harness_version        VARCHAR NOT NULL,
    derived_at             TIMESTAMPTZ NOT NULL
);

-- A frontier comparison (a comparison of metric "frontier") at each load point both arms
-- measured: the two axes' ordinary comparisons (rows of `comparisons`, each held to the
-- A/A control) and what they say together.
CREATE TABLE frontier_findings (
    finding_id             VARCHAR PRIMARY KEY,
    run_id                 VARCHAR NOT NULL,
    role                   VARCHAR NOT NULL,  -- ab | control
    a                      VARCHAR NOT NULL,
    b                      VARCHAR NOT NULL,
    workload               VARCHAR NOT NULL,
    load_point             VARCHAR NOT NULL,
    finding                VARCHAR NOT NULL,  -- b dominates | a dominates | trade-off |
                                              -- no finding | not decidable
    reason                 VARCHAR NOT NULL,
    throughput_verdict     VARCHAR,
    throughput_difference  DOUBLE,
    throughput_ci95_low    DOUBLE,
    throughput_ci95_high   DOUBLE,
    per_user_verdict       VARCHAR,
    per_user_difference    DOUBLE,
    per_user_ci95_low      DOUBLE,
    per_user_ci95_high     DOUBLE,
    throughput_comparison_id VARCHAR,
    per_user_comparison_id VARCHAR,
    harness_version        VARCHAR NOT NULL,
    derived_at             TIMESTAMPTZ NOT NULL
);
