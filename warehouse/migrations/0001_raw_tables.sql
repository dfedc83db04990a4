-- Raw, append-only facts loaded from the measurement's raw files (docs/protocol.md, warehouse relations).
-- Nothing here is derived: metrics are computed by the views (warehouse/views/) and by
-- derivation (warehouse/derive.py).

CREATE TABLE runs (
    run_id            VARCHAR PRIMARY KEY,   -- the Airflow DAG run id
    sweep_name        VARCHAR NOT NULL,
    sweep_path        VARCHAR,
    sweep_sha256      VARCHAR NOT NULL,
    sweep_toml        VARCHAR,               -- the sweep file as it was run
    harness_version   VARCHAR NOT NULL,
    started_at        TIMESTAMPTZ NOT NULL,
    ended_at          TIMESTAMPTZ            -- set when the run's publish step finished
);

CREATE TABLE restarts (
    restart_id               VARCHAR PRIMARY KEY,  -- <run_id>/<arm>/r<k>
    run_id                   VARCHAR NOT NULL,
    arm                      VARCHAR NOT NULL,
    restart_index            INTEGER NOT NULL,
    node                     VARCHAR,
    server_kind              VARCHAR NOT NULL,     -- simulator | command | external
    single_instance          BOOLEAN NOT NULL,     -- external servers cannot be restarted
    status                   VARCHAR NOT NULL,     -- ok | external | failed | crashed | launching | launched
    error                    VARCHAR,
    base_url                 VARCHAR,
    pid                      INTEGER,
    command                  VARCHAR[],
    log_path                 VARCHAR,
    effective_config         JSON,
    effective_config_sha256  VARCHAR,
    server_version           VARCHAR,
    started_at               TIMESTAMPTZ,
    ready_at                 TIMESTAMPTZ,
    stopped_at               TIMESTAMPTZ,
    stop_status              VARCHAR,
    raw_file_sha256          VARCHAR NOT NULL
);

CREATE TABLE windows (
    window_id             VARCHAR PRIMARY KEY,  -- <restart_id>/<workload>-c<concurrency>
    restart_id            VARCHAR NOT NULL,
    run_id                VARCHAR NOT NULL,
    arm                   VARCHAR NOT NULL,
    workload              VARCHAR NOT NULL,
    prompt_set            VARCHAR,
    concurrency           INTEGER NOT NULL,
    submitted             INTEGER NOT NULL,
    completed             INTEGER NOT NULL,
    failed                INTEGER NOT NULL,
    unresolved            INTEGER NOT NULL,
    warmup_submitted      INTEGER NOT NULL,
    drain_status          VARCHAR NOT NULL,     -- complete | incomplete
    drain_timeout_s       DOUBLE,
    window_start          TIMESTAMPTZ NOT NULL, -- first measured submission
    window_end            TIMESTAMPTZ NOT NULL, -- last completion, or the drain deadline
    elapsed_s             DOUBLE NOT NULL,      -- the window's denominator
    min_requests          INTEGER NOT NULL,     -- the n the protocol demands here
    max_tokens            INTEGER,
    temperature           DOUBLE,
    raw_file_sha256       VARCHAR NOT NULL,     -- the window manifest
    requests_file_sha256  VARCHAR NOT NULL      -- the Parquet file of its requests
);

-- One row per HTTP request, warm-up included; timestamps are the measuring process's
-- perf_counter_ns (monotonic). The `requests` view (warehouse/views/requests.sql) derives
-- the metrics.
CREATE TABLE request_records (
    request_id        VARCHAR PRIMARY KEY,
    window_id         VARCHAR NOT NULL,
    seq               INTEGER NOT NULL,
    is_warmup         BOOLEAN NOT NULL,
    status            VARCHAR NOT NULL,   -- completed | failed | unresolved
    http_status       INTEGER,
    error             VARCHAR,
    prompt_id         VARCHAR NOT NULL,
    prompt_sha256     VARCHAR NOT NULL,
    max_tokens        INTEGER NOT NULL,   -- the target; never a numerator (T13)
    temperature       DOUBLE NOT NULL,
    prompt_tokens     BIGINT,
    output_tokens     BIGINT,             -- usage.completion_tokens; NULL when missing
    cached_tokens     BIGINT,
    token_source      VARCHAR NOT NULL,   -- usage | missing (what the client writes;
                                          -- docs/protocol.md lists what imports may add)
    chunks            INTEGER NOT NULL,   -- content-bearing stream events (not tokens, T1)
    finish_reason     VARCHAR,
    t_submit_ns       BIGINT NOT NULL,
    t_first_ns        BIGINT,
    t_last_ns         BIGINT,
    t_done_ns         BIGINT,
    content_event_ns  BIGINT[],
    raw_file_sha256   VARCHAR NOT NULL
);

CREATE TABLE raw_files (
    sha256     VARCHAR PRIMARY KEY,  -- a file is loaded once, whatever its path
    path       VARCHAR NOT NULL,
    kind       VARCHAR NOT NULL,     -- run | restart | window | requests | observations;
                                    -- <kind>-superseded: a second version, not loaded (rows 0)
    rows       BIGINT NOT NULL,
    loaded_at  TIMESTAMPTZ NOT NULL
);

CREATE TABLE validations (
    validation_id  VARCHAR PRIMARY KEY,
    run_id         VARCHAR NOT NULL,
    suite          VARCHAR NOT NULL,
    subject        VARCHAR NOT NULL,  -- what the rule was checked on: a restart_id, a
                                      -- window_id, an entry_id (suite entries) or
                                      -- <run_id>/<arm>/<workload>-c<n> (suite coverage)
    expectation    VARCHAR NOT NULL,  -- the protocol rule's name
    success        BOOLEAN NOT NULL,
    observed       VARCHAR NOT NULL,  -- "expected ..., found ..."
    validated_at   TIMESTAMPTZ NOT NULL
);
