"""The experiment around the numbers (issue #41; docs/protocol.md, "The design"): what a
comparison over restart means could have detected, how many restarts a question needs,
the within-block (paired) analysis of interleaved restarts, and the drift of an arm's
restart means over the sweep. Plain numbers in, plain numbers out: the warehouse
(warehouse/compare.py) and the planning command read the restarts and call these."""
