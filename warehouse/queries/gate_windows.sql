-- Windows of one run, as the GX gate's "windows" suite sees them, with each counter's
-- reconciliation (NULL error = not reconciled: no counter, or no scrape), joined by the
-- quantity it checks: each server family names its counters differently. With them, the
-- client's own lateness (T17; NULL: not measured) and the smallest quantities the window
-- measures, which bound it: the median TTFT and the median decode span (t_last - t_first,
-- of requests with a span) of its completed measured requests, in milliseconds. And how
-- its streams arrived (issue #22): its completed measured requests with at least 2 content
-- events, and of them those whose content events all came in one network read (one stamp;
-- the requests view's delivered_in_one_read). And whether its counters could be read: of
-- its reconciliations (NULL: none, as for imports), how many say 'counter unreadable' (the
-- endpoint answered, but not with counters: a timeout, an error status, text that is not
-- Prometheus'), with the first of their details, and the server family its restart
-- recorded (NULL: no family known, so none known to export counters). And whether its
-- evidence shows speculative decoding (the view window_speculation: 'observed: counters',
-- 'observed: chunks', NULL: not observed), whatever the sweep declared: rule
-- n_at_least_min then demands the speculative n (T4), with its tokens per chunk and
-- acceptance (1 + accepted / drafts) to say so. And, for an open-loop window, how late its
-- requests were sent against their due times (issue #26; NULL for a closed loop). And its
-- energy (issue #39; the view window_energy: NULL where any GPU's readings cannot be true,
-- or a node or listed GPU was not read, energy_gaps saying which), with whether its arm's
-- telemetry reported energy or power in any window of the run (energy_expected: 1, else
-- 0), where a window without energy is unreadable, not merely unmeasured.
WITH energy_arms AS (
    SELECT DISTINCT r.arm
    FROM gpu_telemetry AS t
    JOIN restarts AS r ON r.restart_id = t.restart_id
    WHERE r.run_id = $run_id AND (t.energy_j IS NOT NULL OR t.power_w IS NOT NULL)
), energy AS (
    SELECT window_id, energy_j, energy_source, energy_gaps
    FROM window_energy
    WHERE restart_id IN (SELECT restart_id FROM restarts WHERE run_id = $run_id)
), timed AS (
    SELECT r.window_id,
           quantile_cont((r.t_first_ns - r.t_submit_ns) / 1e6, 0.5) AS median_ttft_ms,
           quantile_cont((r.t_last_ns - r.t_first_ns) / 1e6, 0.5)
               FILTER (WHERE r.t_last_ns > r.t_first_ns) AS median_decode_span_ms,
           count(*) FILTER (WHERE len(r.content_event_ns) >= 2) AS streamed_requests,
           count(*) FILTER (WHERE len(r.content_event_ns) >= 2
                                  AND r.t_first_ns = r.t_last_ns) AS one_read_requests
    FROM request_records AS r
    WHERE r.window_id IN (SELECT window_id FROM windows WHERE run_id = $run_id)
      AND NOT r.is_warmup AND r.status = 'completed'
    GROUP BY r.window_id
)
SELECT w.window_id, w.restart_id, w.arm, w.workload, w.concurrency, w.submitted,
       w.completed, w.failed, w.unresolved, w.drain_status, w.min_requests,
       w.reconcile_tolerance, w.token_count, w.calibration_rel_error,
       w.calibration_detail,
       g.relative_error AS generation_error, g.detail AS generation_detail,
       p.relative_error AS prompt_error,     p.detail AS prompt_detail,
       s.relative_error AS success_error,    s.detail AS success_detail,
       w.client_lag_p50_ms, w.client_lag_p99_ms, w.client_cpu_share,
       w.bunched_event_fraction, t.median_ttft_ms, t.median_decode_span_ms,
       t.streamed_requests, t.one_read_requests,
       u.counters_unreadable, u.unreadable_detail, rs.server_family,
       sp.speculation_observed, sp.streamed_tokens_per_chunk,
       CASE WHEN sp.spec_drafts > 0 THEN 1 + sp.spec_accepted / sp.spec_drafts END
           AS spec_acceptance_length,
       w.arrival_lag_p99_ms, w.arrival_lag_max_ms, w.max_arrival_lag_ms,
       w.requested_span_s, w.achieved_span_s,
       CASE WHEN ea.arm IS NOT NULL THEN 1 ELSE 0 END AS energy_expected,
       e.energy_j AS window_energy_j, e.energy_source, e.energy_gaps
FROM windows AS w
LEFT JOIN reconciliations AS g
       ON g.window_id = w.window_id AND g.quantity = 'generation_tokens'
LEFT JOIN reconciliations AS p
       ON p.window_id = w.window_id AND p.quantity = 'prompt_tokens'
LEFT JOIN reconciliations AS s
       ON s.window_id = w.window_id AND s.quantity = 'finished_requests'
LEFT JOIN timed AS t ON t.window_id = w.window_id
LEFT JOIN (
    SELECT window_id,
           count(*) FILTER (WHERE status = 'counter unreadable') AS counters_unreadable,
           min(detail) FILTER (WHERE status = 'counter unreadable') AS unreadable_detail
    FROM reconciliations
    WHERE run_id = $run_id
    GROUP BY window_id
) AS u ON u.window_id = w.window_id
LEFT JOIN restarts AS rs ON rs.restart_id = w.restart_id
LEFT JOIN window_speculation AS sp ON sp.window_id = w.window_id
LEFT JOIN energy AS e ON e.window_id = w.window_id
LEFT JOIN energy_arms AS ea ON ea.arm = w.arm
WHERE w.run_id = $run_id
ORDER BY w.window_id
