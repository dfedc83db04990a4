-- Issue #25: a scheduled run's own slot, and the slots Airflow skipped before it.
--
-- Airflow runs one run of a sweep at a time and never catches up: the slots that fire
-- while a run outlasts its interval get no run. scheduled_for: the slot (Airflow's logical
-- date) of a scheduled run, NULL for a manual one; skipped_slots: JSON list of the
-- schedule's slots strictly between the previous successful run's and this run's (at most
-- 1,000 listed), skipped_slot_count: how many in all (0: none skipped; NULL: not a
-- scheduled run, or no earlier successful run to count from).
ALTER TABLE runs ADD COLUMN scheduled_for TIMESTAMPTZ;
ALTER TABLE runs ADD COLUMN skipped_slots VARCHAR;
ALTER TABLE runs ADD COLUMN skipped_slot_count INTEGER;
