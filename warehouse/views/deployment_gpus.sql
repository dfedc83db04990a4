-- One row per GPU that a node of a restart's deployment listed when the deployment was
-- ready (restarts.deployment[*].gpus, as its telemetry listed them: benchledger.restart.deployment).
-- Every window's telemetry must show each of them (issue #39: a GPU left off a window's
-- page gives the window no energy, view window_energy, and leaves the restart's clock
-- unchecked, queries/gate_restarts.sql): the one reading of that list for both.
CREATE VIEW deployment_gpus AS
SELECT restart_id, run_id, d.node AS node, unnest(d.gpus).gpu AS gpu
FROM (SELECT restart_id, run_id,
             unnest(from_json(deployment,
                              '[{"node": "VARCHAR", "gpus": [{"gpu": "INTEGER"}]}]')) AS d
      FROM restarts)
