-- Issue #5: what the server's counters, its log and the node's clocks said per window.

CREATE TABLE server_metrics (
    restart_id       VARCHAR NOT NULL,
    window_id        VARCHAR NOT NULL,
    phase            VARCHAR NOT NULL,   -- before | after (the measured window only)
    name             VARCHAR NOT NULL,   -- sample name, e.g. vllm:generation_tokens_total
    labels           VARCHAR NOT NULL,   -- JSON object
    value            DOUBLE NOT NULL,
    scraped_at       TIMESTAMPTZ,
    raw_file_sha256  VARCHAR NOT NULL
);

CREATE TABLE server_log_lines (
    restart_id              VARCHAR NOT NULL,
    window_id               VARCHAR NOT NULL,
    line_no                 INTEGER NOT NULL,  -- within the window's log slice
    kind                    VARCHAR NOT NULL,  -- throughput | spec_decode
    prompt_tok_s            DOUBLE,            -- "Avg prompt throughput"
    generation_tok_s        DOUBLE,            -- "Avg generation throughput"
    accepted_tok_s          DOUBLE,            -- "Accepted throughput" (a different counter)
    drafted_tok_s           DOUBLE,
    mean_acceptance_length  DOUBLE,
    running_reqs            DOUBLE,
    text                    VARCHAR NOT NULL,
    raw_file_sha256         VARCHAR NOT NULL
);

CREATE TABLE node_clocks (
    restart_id        VARCHAR NOT NULL,
    window_id         VARCHAR NOT NULL,
    node              VARCHAR,
    gpu               INTEGER NOT NULL,
    sampled_at        TIMESTAMPTZ,
    sm_clock_mhz      DOUBLE,
    max_sm_clock_mhz  DOUBLE,
    pstate            VARCHAR,
    throttle_reasons  VARCHAR,
    utilization_gpu   DOUBLE,
    under_load        BOOLEAN NOT NULL,
    raw_file_sha256   VARCHAR NOT NULL
);

ALTER TABLE windows ADD COLUMN reconcile_tolerance DOUBLE;
ALTER TABLE windows ADD COLUMN min_clock_ratio DOUBLE;
ALTER TABLE windows ADD COLUMN require_clock_check BOOLEAN;
ALTER TABLE windows ADD COLUMN clock_source VARCHAR;
ALTER TABLE windows ADD COLUMN observation_errors VARCHAR;  -- scrapes or clock reads that failed

-- Client-delivered counts against the server's counter deltas, per window and counter.
CREATE TABLE reconciliations (
    window_id      VARCHAR NOT NULL,
    run_id         VARCHAR NOT NULL,
    counter        VARCHAR NOT NULL,   -- the server counter reconciled
    client_value   DOUBLE,             -- what the client received (usage sums, completions)
    server_delta   DOUBLE,             -- after - before of the counter (all label sets)
    relative_error DOUBLE,             -- |server - client| / client (see status)
    tolerance      DOUBLE,
    status         VARCHAR NOT NULL,   -- match | mismatch | no counter | lower bound
    detail         VARCHAR NOT NULL,
    PRIMARY KEY (window_id, counter)
);

-- Per-window GPU clocks under load are the view window_clocks (warehouse/views/).

ALTER TABLE entries ADD COLUMN warning VARCHAR;      -- e.g. chunk counting would under-report
ALTER TABLE entries ADD COLUMN clock_check VARCHAR;  -- checked | unchecked (require_clock_check =
                                                     -- false) | NULL when no clock rule ran
ALTER TABLE entries ADD COLUMN excluded VARCHAR;     -- restarts left out, and the rule why
