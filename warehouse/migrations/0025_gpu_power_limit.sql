-- Issue #39 item 3: the power limit a GPU's telemetry reports (W; NULL where it reports
-- none), the ceiling the energy plausibility checks of the view window_energy hold its
-- power and its energy counter to (capped at the protocol's own ceiling: a page cannot
-- raise the bound it is checked against). dcgm-exporter prints it where its counters list
-- DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX, DCGM_FI_DEV_POWER_MGMT_LIMIT or
-- DCGM_FI_DEV_ENFORCED_POWER_LIMIT (the largest of them is kept).
ALTER TABLE gpu_telemetry ADD COLUMN power_limit_w DOUBLE;
