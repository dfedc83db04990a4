-- Derived numbers. Each entry carries every label that gives it meaning (phase, scope,
-- numerator, denominator, statistic, population, evidence) and says why it is blocked.
CREATE TABLE entries (
    entry_id            VARCHAR PRIMARY KEY,
    run_id              VARCHAR NOT NULL,
    arm                 VARCHAR NOT NULL,
    workload            VARCHAR NOT NULL,
    metric              VARCHAR NOT NULL,   -- decode_rate | ttft | e2e_rate | ...
    unit                VARCHAR NOT NULL,   -- tok/s | s | fraction | tokens/chunk | tokens/step
    phase               VARCHAR NOT NULL,   -- prefill | decode | end_to_end
    scope               VARCHAR NOT NULL,   -- single_stream | per_user | aggregate
    concurrency         INTEGER NOT NULL,
    numerator           VARCHAR,            -- rates: output_tokens | prompt_tokens |
                                            -- input_plus_output_tokens; fractions:
                                            -- finished_requests | completed_requests;
                                            -- a counter delta; NULL for latencies
    denominator         VARCHAR,            -- what the value divides by, in words (a time span
                                            -- for rates, submitted_requests | finished_requests)
    statistic           VARCHAR NOT NULL,   -- mean | p50 | p90 | p99 | min | max |
                                            -- server_log_peak | server_log_mean
    value               DOUBLE,             -- NULL when no validated window backs it
    ci95_low            DOUBLE,
    ci95_high           DOUBLE,
    n_requests          INTEGER NOT NULL,
    n_restarts          INTEGER NOT NULL,
    restart_mean        DOUBLE,
    restart_ci95_low    DOUBLE,
    restart_ci95_high   DOUBLE,
    restart_effect      BOOLEAN,
    population          VARCHAR NOT NULL,   -- all_submitted | completed_only | finished_only |
                                            -- server_log_lines
    evidence            VARCHAR NOT NULL,   -- rerun (measured by this pipeline: all that
                                            -- derive.py writes) | imported | historical |
                                            -- derived_comparison (docs/protocol.md)
    publishable         BOOLEAN NOT NULL,
    blocked_by          VARCHAR,            -- the failed rules, when not publishable
    model               VARCHAR,
    server_kind         VARCHAR,
    server_version      VARCHAR,
    effective_config_sha256 VARCHAR,        -- NULL when the arm's restarts disagree
    max_tokens          INTEGER,            -- the output target
    mean_prompt_tokens  DOUBLE,
    mean_output_tokens  DOUBLE,
    temperature         DOUBLE,
    harness_version     VARCHAR NOT NULL,
    derived_at          TIMESTAMPTZ NOT NULL
);

-- What may be published is the view published_entries (warehouse/views/).

-- Which requests, raw files and expectation results stand behind each entry.
CREATE TABLE entry_lineage (
    entry_id         VARCHAR NOT NULL,
    request_id       VARCHAR,
    raw_file_sha256  VARCHAR,
    validation_id    VARCHAR
);
