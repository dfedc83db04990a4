-- Issue #42: what came back. Per request, the sha256 of the answer's text as streamed and its
-- length in characters (NULL where no 200 answer came), the same of the reasoning text (NULL:
-- none came), and the texts themselves only where the sweep asked ([defaults]
-- keep_output_text). Loaded from the raw files like every other column (warehouse/load.py
-- takes the columns request_records has); imported evidence leaves them NULL.
ALTER TABLE request_records ADD COLUMN answer_sha256 VARCHAR;
ALTER TABLE request_records ADD COLUMN answer_chars BIGINT;
ALTER TABLE request_records ADD COLUMN reasoning_sha256 VARCHAR;
ALTER TABLE request_records ADD COLUMN reasoning_chars BIGINT;
ALTER TABLE request_records ADD COLUMN answer_text VARCHAR;
ALTER TABLE request_records ADD COLUMN reasoning_text VARCHAR;
