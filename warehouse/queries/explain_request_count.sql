-- How many requests one entry rests on (explain lists the first few of them).
SELECT count(*) AS n
FROM entry_requests
WHERE entry_id = $entry_id
