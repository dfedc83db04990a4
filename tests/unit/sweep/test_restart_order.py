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
