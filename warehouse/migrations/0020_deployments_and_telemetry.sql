-- Issue #24: models that span nodes, GPU telemetry from every node of the deployment, and
-- energy per token.
--
-- gpu_telemetry: one row per GPU and reading during a measured window, read from every
-- node the arm's deployment spans (benchledger/server/telemetry.py): `before` and `after` bracket
-- the window (the energy counters' delta is the window's energy), `during` every
-- clock_interval_s between. A field the source lacks is NULL, never 0. Loaded from each
-- window's <window>.telemetry.parquet; node_clocks keeps the clock samples of windows
-- measured before this table (the view window_clocks reads both).
CREATE TABLE gpu_telemetry (
    restart_id           VARCHAR NOT NULL,
    window_id            VARCHAR NOT NULL,
    node                 VARCHAR NOT NULL,   -- the deployment's node, as the sweep names it
    source               VARCHAR NOT NULL,   -- dcgm | http | nvidia-smi
    phase                VARCHAR NOT NULL,   -- before | during | after
    sampled_at           TIMESTAMPTZ NOT NULL,
    gpu                  INTEGER NOT NULL,
    uuid                 VARCHAR,
    model                VARCHAR,
    hostname             VARCHAR,            -- the machine, as its telemetry names it
    sm_clock_mhz         DOUBLE,
    max_sm_clock_mhz     DOUBLE,
    mem_clock_mhz        DOUBLE,
    power_w              DOUBLE,
    energy_j             DOUBLE,             -- the GPU's energy counter (DCGM: since driver load)
    utilization_gpu      DOUBLE,
    memory_used_mib      DOUBLE,
    clock_event_reasons  BIGINT,             -- DCGM/NVML clock-event (throttle) bitmask
    clock_event_names    VARCHAR,            -- its bits by name; '' for none
    pstate               VARCHAR,
    raw_file_sha256      VARCHAR NOT NULL
);

-- Every node the restart's deployment spanned, the head first (JSON: node, address, role,
-- rank, host, pid, status, its GPUs as its telemetry listed them, how its process ended),
-- and the node whose process died when the restart crashed.
ALTER TABLE restarts ADD COLUMN deployment VARCHAR;
ALTER TABLE restarts ADD COLUMN crashed_node VARCHAR;
ALTER TABLE windows ADD COLUMN telemetry_file_sha256 VARCHAR;
-- Where an energy entry's joules came from: the GPUs' energy counters, or their power
-- samples integrated over the window (a GPU without a counter); NULL on other entries.
ALTER TABLE entries ADD COLUMN energy_source VARCHAR;
