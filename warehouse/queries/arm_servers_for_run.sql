-- What each arm of one run was measured on: its nodes, server kind, server versions and
-- effective configurations (by sha256) over its restarts, and how many restarts it had.
-- More than one version or configuration in a row means the arm's restarts disagreed.
SELECT arm,
       string_agg(DISTINCT node, ', ' ORDER BY node) AS nodes,
       string_agg(DISTINCT server_kind, ', ' ORDER BY server_kind) AS server_kind,
       string_agg(DISTINCT server_version, ', ' ORDER BY server_version) AS server_version,
       string_agg(DISTINCT effective_config_sha256, ', '
                  ORDER BY effective_config_sha256) AS effective_config_sha256,
       count(*) AS restarts
FROM restarts
WHERE run_id = $run_id
GROUP BY arm
ORDER BY arm
