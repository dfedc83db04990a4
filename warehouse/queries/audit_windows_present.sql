-- Rule windows_present (benchledger/rules/windows.py): every planned (arm, workload, load
-- point) of a run has one window per planned restart. `planned_cells` (subject, arm,
-- workload, concurrency, load_point, planned_windows) is the sweep's plan, registered by the
-- caller. A window from before load points were recorded is at 'c' || concurrency. Returns
-- every planned cell with its verdict; the rows breaking the rule are those with
-- success = false.
SELECT p.subject,
       coalesce(count(w.window_id), 0) = p.planned_windows AS success,
       format('{} window(s) (one per restart)', p.planned_windows) AS expected,
       count(w.window_id)::VARCHAR AS found
FROM planned_cells AS p
LEFT JOIN windows AS w
       ON w.run_id = $run_id AND w.arm = p.arm AND w.workload = p.workload
      AND coalesce(w.load_point, 'c' || w.concurrency) = p.load_point
GROUP BY p.subject, p.planned_windows, p.arm, p.workload, p.concurrency, p.load_point
ORDER BY p.arm, p.workload, p.concurrency, p.load_point
