-- Issue #14: evidence from elsewhere. Another harness's results (GuideLLM, AIPerf, vllm
-- bench serve) and summary rows recovered from old reports are loaded as raw evidence with
-- their provenance, checked by the same rules and published only under their own evidence
-- label (docs/imports.md). A field a source does not carry stays NULL: the NOT NULL
-- constraints below are dropped where an imported or recovered row may not know the value
-- (the pipeline's own rows still always carry it).

-- What a run is: rerun (measured by this pipeline; every run before this migration),
-- imported (another tool's file) or historical (a report's rows); where it came from.
ALTER TABLE runs ADD COLUMN evidence VARCHAR DEFAULT 'rerun';
ALTER TABLE runs ADD COLUMN source_tool VARCHAR;          -- guidellm | aiperf | vllm-bench | report
ALTER TABLE runs ADD COLUMN source_tool_version VARCHAR;  -- as the file records it
ALTER TABLE runs ADD COLUMN source_command VARCHAR;       -- the tool's command line, if recorded
ALTER TABLE runs ADD COLUMN source_model VARCHAR;         -- the model the tool named
ALTER TABLE runs ADD COLUMN source_file_sha256 VARCHAR;   -- the file the import is known by
ALTER TABLE runs ADD COLUMN import_flags VARCHAR;         -- what the import found, in words
ALTER TABLE runs ADD COLUMN imported_at TIMESTAMPTZ;
ALTER TABLE runs ALTER COLUMN sweep_sha256 DROP NOT NULL;  -- an import has no sweep file
ALTER TABLE runs ALTER COLUMN started_at DROP NOT NULL;    -- not every tool records it

-- A benchmark or load point of an imported file. load_pattern is the tool's own name for it
-- (concurrent@2, rate@inf,max_concurrency@2, ...); reported_* are the tool's own summary
-- rates, kept beside the rates recomputed from its request records (view imported_windows).
ALTER TABLE windows ADD COLUMN load_pattern VARCHAR;
ALTER TABLE windows ADD COLUMN reported_output_tok_s DOUBLE;
ALTER TABLE windows ADD COLUMN reported_total_tok_s DOUBLE;
ALTER TABLE windows ALTER COLUMN restart_id DROP NOT NULL;        -- no server instance known
ALTER TABLE windows ALTER COLUMN concurrency DROP NOT NULL;       -- rate-driven loads
ALTER TABLE windows ALTER COLUMN warmup_submitted DROP NOT NULL;
ALTER TABLE windows ALTER COLUMN window_start DROP NOT NULL;      -- no zone-safe time recorded
ALTER TABLE windows ALTER COLUMN window_end DROP NOT NULL;

-- An imported request: the tool's own id for it, and NULL where the tool kept no value.
ALTER TABLE request_records ADD COLUMN source_request_id VARCHAR;
ALTER TABLE request_records ALTER COLUMN prompt_id DROP NOT NULL;
ALTER TABLE request_records ALTER COLUMN prompt_sha256 DROP NOT NULL;
ALTER TABLE request_records ALTER COLUMN max_tokens DROP NOT NULL;
ALTER TABLE request_records ALTER COLUMN temperature DROP NOT NULL;
ALTER TABLE request_records ALTER COLUMN token_source DROP NOT NULL;  -- not recorded
ALTER TABLE request_records ALTER COLUMN chunks DROP NOT NULL;
ALTER TABLE request_records ALTER COLUMN t_submit_ns DROP NOT NULL;

-- One row per summary row of a historical report, exactly as the CSV had it (empty = NULL).
CREATE TABLE report_rows (
    row_id          VARCHAR PRIMARY KEY,   -- <run_id>/line<n>
    run_id          VARCHAR NOT NULL,
    line_no         INTEGER NOT NULL,      -- the CSV line
    profile         VARCHAR,               -- the report's name for the workload shape/series
    evidence        VARCHAR NOT NULL,      -- historical | derived_comparison
    record_id       VARCHAR,
    model           VARCHAR,
    runtime         VARCHAR,
    backend         VARCHAR,
    hardware        VARCHAR,
    input_tokens    BIGINT,
    output_target   BIGINT,
    clients         BIGINT,
    requests        BIGINT,
    arrival         VARCHAR,
    prompt_cache    VARCHAR,
    elapsed_s       DOUBLE,
    output_tok_s    DOUBLE,
    total_tok_s     DOUBLE,
    ttft_s          DOUBLE,
    ttft_statistic  VARCHAR,
    tpot_s          DOUBLE,
    tpot_statistic  VARCHAR,
    completed       BIGINT,
    failed          BIGINT,
    unresolved      BIGINT,
    drain_status    VARCHAR,
    notes           VARCHAR,
    raw_file_sha256 VARCHAR NOT NULL
);

-- Entries of imported and historical evidence: the labels their source gives, and the
-- fields it did not record, named (not_recorded), so an export shows the gap instead of
-- hiding it. Entries derived by the pipeline keep NULL in these.
ALTER TABLE entries ADD COLUMN IF NOT EXISTS token_source VARCHAR;  -- also issue #13's
ALTER TABLE entries ADD COLUMN source_tool VARCHAR;
ALTER TABLE entries ADD COLUMN profile VARCHAR;
ALTER TABLE entries ADD COLUMN record_id VARCHAR;
ALTER TABLE entries ADD COLUMN runtime VARCHAR;
ALTER TABLE entries ADD COLUMN backend VARCHAR;
ALTER TABLE entries ADD COLUMN hardware VARCHAR;
ALTER TABLE entries ADD COLUMN notes VARCHAR;
ALTER TABLE entries ADD COLUMN not_recorded VARCHAR;
ALTER TABLE entries ALTER COLUMN workload DROP NOT NULL;
ALTER TABLE entries ALTER COLUMN concurrency DROP NOT NULL;
ALTER TABLE entries ALTER COLUMN scope DROP NOT NULL;       -- a latency of unknown clients
ALTER TABLE entries ALTER COLUMN statistic DROP NOT NULL;   -- a latency whose statistic a
                                                           -- report did not name
ALTER TABLE entries ALTER COLUMN n_requests DROP NOT NULL;
ALTER TABLE entries ALTER COLUMN n_restarts DROP NOT NULL;  -- no restarts known
ALTER TABLE entries ALTER COLUMN population DROP NOT NULL;
