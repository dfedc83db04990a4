-- How many rows each table of one run's benchledger page has in all (the page shows one
-- bounded page of each): its published and blocked current entries, the rows of its
-- blocked entries' table (one per blocked entry, failed rule and subject, as
-- blocks_for_run.sql lists them) and its comparisons. Counted here, never by fetching them.
WITH mine AS (
    SELECT entry_id, publishable
    FROM current_entries
    WHERE run_id = $run_id
), block_rows AS (
    SELECT count(*) AS n
    FROM mine AS e
    LEFT JOIN entry_blocks AS b USING (entry_id)
    WHERE NOT e.publishable
)
SELECT count(*) FILTER (WHERE publishable) AS published,
       count(*) FILTER (WHERE NOT publishable) AS blocked,
       (SELECT n FROM block_rows) AS block_rows,
       (SELECT count(*) FROM comparisons WHERE run_id = $run_id) AS comparisons
FROM mine
