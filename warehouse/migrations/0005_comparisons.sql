-- Issue #4: the restart as the unit of replication, A/B comparisons with A/A controls.

-- Each entry's per-restart (or per-window) summary: what restart-level statistics,
-- comparisons and the variance report are computed from.
CREATE TABLE entry_restart_means (
    entry_id     VARCHAR NOT NULL,
    restart_id   VARCHAR NOT NULL,
    n_requests   INTEGER NOT NULL,
    mean         DOUBLE NOT NULL,
    sd           DOUBLE,             -- NULL with one request (or for window-level entries)
    PRIMARY KEY (entry_id, restart_id)
);

CREATE TABLE comparisons (
    comparison_id       VARCHAR PRIMARY KEY,
    run_id              VARCHAR NOT NULL,
    role                VARCHAR NOT NULL,   -- ab (an A/B) | control (the A/A it is held to)
    a                   VARCHAR NOT NULL,   -- the baseline arm
    b                   VARCHAR NOT NULL,   -- the candidate arm
    workload            VARCHAR NOT NULL,
    metric              VARCHAR NOT NULL,
    numerator           VARCHAR,
    concurrency         INTEGER NOT NULL,
    unit                VARCHAR,
    higher_is_better    BOOLEAN,
    a_mean              DOUBLE,             -- mean of a's restart means
    b_mean              DOUBLE,
    difference          DOUBLE,             -- b - a
    ci95_low            DOUBLE,             -- Welch over restart means
    ci95_high           DOUBLE,
    df                  DOUBLE,
    ratio               DOUBLE,             -- b / a
    a_restarts          INTEGER,
    b_restarts          INTEGER,
    control_a           VARCHAR,
    control_b           VARCHAR,
    control_difference  DOUBLE,             -- the same-vs-same difference (A/A)
    verdict             VARCHAR NOT NULL,   -- improvement | regression | no finding | not decidable
    reason              VARCHAR NOT NULL,   -- why this verdict, in words
    a_entry_id          VARCHAR,            -- lineage to the entries compared
    b_entry_id          VARCHAR,
    control_a_entry_id  VARCHAR,
    control_b_entry_id  VARCHAR,
    harness_version     VARCHAR NOT NULL,
    derived_at          TIMESTAMPTZ NOT NULL
);

-- The spread within vs between restarts is the view variance_report (warehouse/views/).
