"""Issue #41, item 1: restarts run in blocks, the order inside a block counterbalanced
(a Williams design drawn from the seed), or arm by arm where the sweep says so."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from benchledger.sweep.order import restart_slots, williams_rows
from benchledger.sweep.spec import SweepError, parse_sweep
from tests.sweeps import defaults, simulator_arm, sweep, toml


def _sweep(arms: int, restarts: int = 4, seed: int = 0, **section) -> object:
    return parse_sweep(toml(sweep(
        "order", [simulator_arm(f"arm{i}", {"step_ms": 1 + i}) for i in range(arms)],
        defaults={**defaults(restarts=restarts), "seed": seed},
        sweep={"retries": 0, **section})))


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 6])
def test_a_williams_design_puts_every_arm_in_every_position_and_after_every_other(m):
    rows = williams_rows(m)
    assert all(sorted(row) == list(range(m)) for row in rows)
    for position in range(m):  # each treatment equally often in each position
        counts = Counter(row[position] for row in rows)
        assert set(counts) == set(range(m)) and len(set(counts.values())) == 1
    follows = Counter(pair for row in rows for pair in itertools.pairwise(row))
    if m > 1:  # each ordered pair adjacent equally often (balanced for carry-over)
        assert set(follows) == {(i, j) for i in range(m) for j in range(m) if i != j}
        assert len(set(follows.values())) == 1


def test_two_arms_alternate_abba_and_every_restart_runs_once():
    slots = restart_slots(_sweep(2))
    assert [(s.block, s.position) for s in slots] == [(k, p) for k in range(4) for p in (0, 1)]
    firsts = [s.arm for s in slots if s.position == 0]
    assert firsts[0] != firsts[1] and firsts[0] == firsts[2]  # AB BA AB BA
    assert sorted((s.arm, s.k) for s in slots) == [(f"arm{i}", k) for i in range(2)
                                                    for k in range(4)]
    assert all(s.k == s.block for s in slots)
    assert [s.sequence for s in slots] == list(range(8))


def test_the_order_is_drawn_from_the_seed_and_reproducible():
    orders = {seed: [s.arm for s in restart_slots(_sweep(3, seed=seed))] for seed in range(8)}
    assert orders[0] == [s.arm for s in restart_slots(_sweep(3, seed=0))]
    assert len({tuple(o) for o in orders.values()}) > 1  # the seed changes the letters


def test_no_arm_is_always_first():
    slots = restart_slots(_sweep(3, restarts=3))
    assert len({s.arm for s in slots if s.position == 0}) == 3


def test_arm_by_arm_keeps_the_file_order():
    slots = restart_slots(_sweep(2, restarts=2, restart_order="arm_by_arm"))
    assert [(s.arm, s.k) for s in slots] == [("arm0", 0), ("arm0", 1), ("arm1", 0),
                                             ("arm1", 1)]


def test_an_unknown_order_is_refused_by_name():
    with pytest.raises(SweepError, match="restart_order"):
        _sweep(2, restart_order="random")


def test_a_sequential_sweep_plans_its_maximum_and_looks_after_each_block_past_the_minimum():
    from benchledger.sweep.order import looks_after, minimum_restarts, planned_restarts

    seq = parse_sweep(toml(sweep(
        "seq", [simulator_arm("a", {"step_ms": 1}), simulator_arm("b", {"step_ms": 2})],
        defaults=defaults(restarts=2), sweep={"retries": 0, "max_restarts": 5},
        comparisons=[{"a": "a", "b": "b", "metric": "decode_rate"}])))
    slots = restart_slots(seq)
    assert max(s.block for s in slots) == 4 and len(slots) == 10
    assert planned_restarts(seq, "a") == 5 and minimum_restarts(seq) == 2
    assert looks_after(seq) == [1, 2, 3]  # after blocks 2, 3 and 4 of 5 (0-based 1..3)
    assert looks_after(_sweep(2)) == []


@pytest.mark.parametrize("section, extra, message", [
    ({"max_restarts": 1}, {}, "max_restarts = 1 is below restarts = 2"),
    ({"max_restarts": 6, "restart_order": "arm_by_arm"}, {}, "needs restart_order"),
    ({"max_restarts": 6}, {"no_comparisons": True}, "name \\[\\[comparisons\\]\\]"),
    ({"max_restarts": 6}, {"restarts": 1}, "same restarts >= 2"),
    ({"max_restarts": 6}, {"arm_restarts": 3}, "found: a 3, b 2"),
])
def test_a_sequential_sweep_that_cannot_run_is_refused_naming_why(section, extra, message):
    arms = [simulator_arm("a", {"step_ms": 1}, **({"restarts": extra["arm_restarts"]}
                                                 if "arm_restarts" in extra else {})),
            simulator_arm("b", {"step_ms": 2})]
    comparisons = [] if extra.get("no_comparisons") else [
        {"a": "a", "b": "b", "metric": "decode_rate"}]
    with pytest.raises(SweepError, match=message):
        parse_sweep(toml(sweep("seq", arms, defaults=defaults(restarts=extra.get("restarts", 2)),
                               sweep={"retries": 0, **section}, comparisons=comparisons)))
