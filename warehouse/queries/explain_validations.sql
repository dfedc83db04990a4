-- The expectation results an entry rests on (its restarts', windows' and its own).
SELECT v.validation_id, v.suite, v.subject, v.expectation, v.success, v.observed
FROM entry_lineage AS l
JOIN validations AS v ON v.validation_id = l.validation_id
WHERE l.entry_id = $entry_id
ORDER BY v.suite, v.subject, v.expectation
