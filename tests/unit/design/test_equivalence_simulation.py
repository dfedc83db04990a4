"""Issue #42, fast: benchmarks/equivalence_simulation.py's experiments, fewer of them. The
rule outputs_equivalent blocks no lossless candidate of a deterministic server, rarely one
of a nondeterministic server it was held to the control of, and most lossy ones."""

from __future__ import annotations

from benchmarks.equivalence_simulation import Scenario, run_scenario

EXPERIMENTS = 400


def test_a_lossless_candidate_is_rarely_blocked():
    exact = run_scenario(Scenario("exact", 40, 0.0, 0.0), EXPERIMENTS, 1)
    assert exact["false_block_rate"] == 0.0  # nothing diverges: nothing can be blocked
    noisy = run_scenario(Scenario("noisy", 40, 0.05, 0.0), EXPERIMENTS, 2)
    assert noisy["false_block_rate"] < 0.06, noisy  # about 2% over 10,000


def test_a_lossy_candidate_is_caught_and_more_prompts_catch_more():
    few = run_scenario(Scenario("few", 16, 0.0, 0.2), EXPERIMENTS, 3)
    many = run_scenario(Scenario("many", 100, 0.0, 0.2), EXPERIMENTS, 4)
    assert many["power"] > 0.95 and few["power"] < many["power"], (few, many)


def test_without_a_control_any_nondeterminism_blocks():
    alone = run_scenario(Scenario("alone", 40, 0.02, 0.0, control=False), EXPERIMENTS, 5)
    assert alone["false_block_rate"] > 0.4  # 1 - 0.98^40 = 55%: why a control is asked for
