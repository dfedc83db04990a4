-- One row per entry that may be published: the current derivation of its key (see
-- current_entries) and it passed every rule. A superseded or blocked number never
-- appears here, however good it looks.
CREATE VIEW published_entries AS
SELECT * FROM current_entries WHERE publishable;
