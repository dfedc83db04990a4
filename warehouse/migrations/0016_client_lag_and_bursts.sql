-- Issue #21: a ruler that knows its own error (T17). Windows recorded before the client
-- measured its own lateness, and imported evidence, carry none of it: their rows keep NULL
-- (not measured), and the rules that read it find nothing to check there.

-- How many client worker processes measured the window.
ALTER TABLE windows ADD COLUMN client_workers INTEGER;
-- The client's own lateness over the measured part, in milliseconds: every 5 ms a probe in
-- each worker's event loop schedules a callback and measures how long it waited before it
-- ran, which is how long a stream event that became ready waited before it was stamped;
-- pooled over the workers. The rule client_lag_within_bound judges the p99.
ALTER TABLE windows ADD COLUMN client_lag_p50_ms DOUBLE;
ALTER TABLE windows ADD COLUMN client_lag_p99_ms DOUBLE;
ALTER TABLE windows ADD COLUMN client_lag_max_ms DOUBLE;
ALTER TABLE windows ADD COLUMN client_lag_samples BIGINT;
-- The workers' CPU seconds over the measured part / (wall seconds x workers): near 1, the
-- client's cores were saturated and its stamps late.
ALTER TABLE windows ADD COLUMN client_cpu_share DOUBLE;
-- The fraction of the measured requests' content events that arrived in one network read
-- together with another content event (the same stamp); NULL without content events.
ALTER TABLE windows ADD COLUMN bunched_event_fraction DOUBLE;

-- What an entry says about the ruler behind it: how many of its windows' completed
-- measured requests arrived in a burst (the requests view's rate_withheld), the largest
-- client lag p99 and CPU share of its windows (NULL: not measured), and the burst share
-- its decode-phase per-request entries were held to (rule burst_share_bounded).
ALTER TABLE entries ADD COLUMN n_burst BIGINT;
ALTER TABLE entries ADD COLUMN client_lag_p99_ms DOUBLE;
ALTER TABLE entries ADD COLUMN client_cpu_share DOUBLE;
ALTER TABLE entries ADD COLUMN max_burst_fraction DOUBLE;
