-- Issue #6: where a run's expectation results were rendered as GX Data Docs.
ALTER TABLE runs ADD COLUMN data_docs_path VARCHAR;
