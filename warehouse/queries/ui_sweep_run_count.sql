-- How many runs one sweep has (the benchledger page lists them a page at a time).
SELECT count(*) AS runs
FROM runs
WHERE sweep_name = $sweep_name
