-- Issue #26: the traffic users really send. Each run records how every workload that is not a
-- built-in prompt set was prepared (its dataset or trace file by sha256, its distributions
-- and seed, the ids it used), each request which item, session, turn and shared-prefix group
-- it came from, what length was asked for and when it was due, and what a reasoning model
-- streamed as reasoning apart from its answer.

-- One row per (run, workload) prepared by the run's plan (benchledger.workloads): the
-- prepared requests are a file of the run folder (<workload>.workload.arrow), named here by
-- its sha256 and checked by every measure step before it is used. A dataset or trace that
-- changed between runs has another sha256: never silently the same workload.
CREATE TABLE workloads (
    run_id           VARCHAR NOT NULL,
    workload         VARCHAR NOT NULL,
    kind             VARCHAR NOT NULL,   -- dataset | synthetic | trace (builtin: no row)
    items            BIGINT NOT NULL,    -- requests prepared (sessions x turns)
    seed             BIGINT,
    sampling         VARCHAR,            -- dataset: ordered | seeded
    dataset_path     VARCHAR,
    dataset_sha256   VARCHAR,            -- a file's bytes, or a folder's files listed
    dataset_rows     BIGINT,
    dataset_format   VARCHAR,            -- jsonl | sharegpt | folder
    trace_path       VARCHAR,
    trace_sha256     VARCHAR,
    trace_rows       BIGINT,
    time_scale       DOUBLE,
    turns            INTEGER,            -- multi-turn: requests per session
    think_time_s     DOUBLE,
    history          VARCHAR,            -- multi-turn: server | dataset answers sent back
    shared_prefix_groups INTEGER,
    shared_prefix_tokens BIGINT,
    ids_sha256       VARCHAR,            -- of the item ids used, in order
    prepared_file    VARCHAR,
    prepared_sha256  VARCHAR NOT NULL,
    provenance       JSON NOT NULL,      -- everything above and the distributions' parameters
    PRIMARY KEY (run_id, workload)
);

-- Per request: where it came from and what was asked (NULL for built-in prompt sets; its
-- prompt_id is the dataset's id of the row, or the generated id of a synthetic or trace row).
ALTER TABLE request_records ADD COLUMN session BIGINT;        -- multi-turn: the conversation
ALTER TABLE request_records ADD COLUMN turn INTEGER;          -- 0-based turn within it
ALTER TABLE request_records ADD COLUMN prefix_group BIGINT;   -- shared prefix: its group
ALTER TABLE request_records ADD COLUMN requested_input_tokens BIGINT;  -- synthetic, trace
-- Open loop (poisson, trace): when the request was due (perf_counter_ns, the same clock as
-- t_submit_ns); t_submit_ns - t_scheduled_ns is how late the client sent it.
ALTER TABLE request_records ADD COLUMN t_scheduled_ns BIGINT;
-- Reasoning models: what streamed as reasoning (delta.reasoning_content / delta.reasoning)
-- is kept apart from the answer (delta.content, t_first_ns .. t_last_ns).
ALTER TABLE request_records ADD COLUMN reasoning_tokens BIGINT;  -- usage.completion_tokens_details
ALTER TABLE request_records ADD COLUMN reasoning_chunks BIGINT;
ALTER TABLE request_records ADD COLUMN t_first_reasoning_ns BIGINT;
ALTER TABLE request_records ADD COLUMN t_last_reasoning_ns BIGINT;

-- Per window: its workload's kind and prepared file, and how closely an open-loop window
-- kept its schedule (requested against achieved arrivals; rule arrivals_on_schedule).
ALTER TABLE windows ADD COLUMN workload_kind VARCHAR;
ALTER TABLE windows ADD COLUMN workload_file_sha256 VARCHAR;
ALTER TABLE windows ADD COLUMN turns INTEGER;
ALTER TABLE windows ADD COLUMN think_time_s DOUBLE;
ALTER TABLE windows ADD COLUMN requested_span_s DOUBLE;   -- first to last due submission
ALTER TABLE windows ADD COLUMN achieved_span_s DOUBLE;    -- first to last actual submission
ALTER TABLE windows ADD COLUMN arrival_lag_p50_ms DOUBLE;
ALTER TABLE windows ADD COLUMN arrival_lag_p99_ms DOUBLE;
ALTER TABLE windows ADD COLUMN arrival_lag_max_ms DOUBLE;
ALTER TABLE windows ADD COLUMN max_arrival_lag_ms DOUBLE; -- the bound the rule applied
