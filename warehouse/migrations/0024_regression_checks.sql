-- Issue #28: the regression gate of a recurring sweep (`[sweep] regression_gate = true`).
-- One row per headline entry of a checked run: its verdict against the previous published
-- run of the same line and configuration (warehouse/history.py), held to the sweep's A/A
-- control. The gate task fails when any row of its run says 'regression'; the rows stay,
-- so an auditor sees what every check found, passes included. A re-check of a run
-- replaces that run's rows.
CREATE TABLE regression_checks (
    run_id                 VARCHAR NOT NULL,
    sweep_name             VARCHAR NOT NULL,
    entry_id               VARCHAR NOT NULL,   -- this run's entry
    arm                    VARCHAR NOT NULL,
    workload               VARCHAR NOT NULL,
    metric                 VARCHAR NOT NULL,
    statistic              VARCHAR NOT NULL,
    scope                  VARCHAR NOT NULL,
    numerator              VARCHAR NOT NULL,   -- '' for latencies
    load_point             VARCHAR NOT NULL,
    unit                   VARCHAR NOT NULL,
    previous_run_id        VARCHAR,            -- NULL: nothing earlier in the segment
    restart_mean           DOUBLE,
    previous_restart_mean  DOUBLE,
    difference             DOUBLE,             -- this run minus the previous
    ci95_low               DOUBLE,             -- Welch over the two runs' restart means
    ci95_high              DOUBLE,
    control_difference     DOUBLE,             -- the largest A/A |b - a| of both runs
    segment                INTEGER NOT NULL,   -- the line's configuration segment
    config_change          VARCHAR,            -- what changed, on a segment's first run
    verdict                VARCHAR NOT NULL,   -- see warehouse/history.py
    reason                 VARCHAR NOT NULL,
    harness_version        VARCHAR NOT NULL,
    checked_at             TIMESTAMPTZ NOT NULL
);
