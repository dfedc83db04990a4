-- Each window of one run with the energy its deployment's GPUs drew over it (the view
-- window_energy; NULL: no telemetry, or a GPU or node without a reading at both ends), for
-- the energy entries (warehouse/metrics.py, warehouse/derive.py).
SELECT window_id, energy_j, energy_source, energy_gaps, span_s AS energy_span_s
FROM window_energy
WHERE restart_id IN (SELECT restart_id FROM restarts WHERE run_id = $run_id)
ORDER BY window_id
