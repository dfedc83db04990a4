-- Issue #42: whether two arms gave the same answers (warehouse/equivalence.py). Per comparison
-- row (an A/B, or the A/A control it is held to) and workload: the prompts both arms answered
-- (the text actually sent), how many got the same answer, the divergent ones named (JSON: a
-- list of {prompt_id, prompt_sha256, first_divergent_char}, at most 20; the character is NULL
-- where the texts were not kept); an A/B also carries its control's two counts and the bound
-- its divergent share is held to (rule outputs_equivalent). NULL: the comparison does not
-- check answers (temperature above 0, `equivalence = false`) or was derived before this.
ALTER TABLE comparisons ADD COLUMN equivalence_prompts INTEGER;
ALTER TABLE comparisons ADD COLUMN equivalence_identical INTEGER;
ALTER TABLE comparisons ADD COLUMN equivalence_divergent VARCHAR;
ALTER TABLE comparisons ADD COLUMN control_equivalence_prompts INTEGER;
ALTER TABLE comparisons ADD COLUMN control_equivalence_identical INTEGER;
ALTER TABLE comparisons ADD COLUMN equivalence_bound DOUBLE;
