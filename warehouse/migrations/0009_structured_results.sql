-- Issue #9: rule results as structured columns, and which rule blocked which entry as rows.

-- What the rule demanded of the subject and what the subject showed (`observed` keeps the
-- one-line reading "expected ..., found ..."), and the catalogue version that judged it
-- (benchledger.rules.RULESET_VERSION). Rows written before this migration have NULLs here.
ALTER TABLE validations ADD COLUMN expected VARCHAR;
ALTER TABLE validations ADD COLUMN found VARCHAR;
ALTER TABLE validations ADD COLUMN ruleset_version VARCHAR;

-- One row per blocked entry, failed rule and the subject it failed on (a restart, window,
-- coverage cell or the entry itself). entries.blocked_by is the same rows as text; the CLI
-- summary, the report and audits read this table.
CREATE TABLE entry_blocks (
    entry_id       VARCHAR NOT NULL,
    rule           VARCHAR NOT NULL,   -- a rule of the catalogue (benchledger/rules/)
    subject        VARCHAR NOT NULL,
    validation_id  VARCHAR,            -- the result that failed
    expected       VARCHAR,
    found          VARCHAR,
    PRIMARY KEY (entry_id, rule, subject)
);
