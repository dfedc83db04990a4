-- Why nothing (or less) published: per rule of the restart, window and request suites that
-- failed in one run ($rules: their names, from the catalogue), how many of its subjects
-- failed of those it judged, and one failure's subject, expected and found. An
-- exclude_restart rule (clock_under_load) leaves restarts out: the entries then fail only
-- entry_has_validated_value, and this is where the cause shows (issue #23).
WITH latest AS (
    SELECT suite, subject, expectation, success, expected, found, observed
    FROM validations
    WHERE run_id = $run_id AND list_contains($rules, expectation)
    QUALIFY row_number() OVER (PARTITION BY suite, subject, expectation
                               ORDER BY validated_at DESC, validation_id) = 1
)
SELECT expectation AS rule,
       any_value(suite) AS suite,
       count(*) FILTER (WHERE NOT success) AS n_failed,
       count(*) AS n_checked,
       min(subject) FILTER (WHERE NOT success) AS example_subject,
       arg_min(coalesce(expected, observed), subject) FILTER (WHERE NOT success)
           AS example_expected,
       arg_min(coalesce(found, observed), subject) FILTER (WHERE NOT success) AS example_found
FROM latest
GROUP BY expectation
HAVING count(*) FILTER (WHERE NOT success) > 0
ORDER BY n_failed DESC, rule
