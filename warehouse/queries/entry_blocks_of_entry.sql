-- Why one entry is blocked: one row per failed rule and the subject it failed on.
SELECT rule, subject, expected, found
FROM entry_blocks
WHERE entry_id = $entry_id
ORDER BY rule, subject
