-- Issue #11: an entry says how the server's own counters checked the windows behind it
-- (docs/protocol.md, warehouse relations): 'reconciled', 'lower bound', 'partial' or
-- 'no counter'. A number whose token counts no counter confirmed must say so where it is
-- read. Entries derived before this migration keep NULL (not recorded).
ALTER TABLE entries ADD COLUMN counter_check VARCHAR;
