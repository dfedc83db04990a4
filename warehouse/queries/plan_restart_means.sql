-- The restart means behind one run's A/B comparisons, each arm's (benchledger plan,
-- publishing/plan.py): per restart its mean, its request-level sd and its n.
SELECT c.comparison_id, c.a, c.b, c.workload, c.metric, c.numerator, c.load_point,
       c.concurrency, c.unit, c.smallest_effect, side.side, m.restart_id, m.n_requests,
       m.mean, m.sd
FROM comparisons AS c
CROSS JOIN (VALUES ('a'), ('b')) AS side(side)
JOIN entry_restart_means AS m
  ON m.entry_id = CASE side.side WHEN 'a' THEN c.a_entry_id ELSE c.b_entry_id END
WHERE c.run_id = $run_id AND c.role = 'ab'
ORDER BY c.metric, c.workload, c.a, c.b, c.comparison_id, side.side, m.restart_id
