-- The latest result of every (suite, subject, expectation) of one run.
SELECT validation_id, suite, subject, expectation, success, expected, found, observed,
       validated_at
FROM validations
WHERE run_id = $run_id
QUALIFY row_number() OVER (PARTITION BY suite, subject, expectation
                           ORDER BY validated_at DESC, validation_id) = 1
ORDER BY suite, subject, expectation
