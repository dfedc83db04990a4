"""Issue #41, item 5: the sequential boundaries (benchledger/design/sequential.py) against
published tables and against the error they promise, and the looks a sweep takes."""

from __future__ import annotations

import numpy as np
import pytest

from benchledger.design.sequential import (
    ALPHA,
    first_decision,
    look_blocks,
    looks,
    spent,
    t_boundary,
    z_boundaries,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_five_equal_looks_match_the_published_obrien_fleming_type_boundaries():
    # Lan-DeMets O'Brien-Fleming-type spending, two-sided 0.05, five equally spaced looks:
    # 4.8769, 3.3569, 2.6803, 2.2898, 2.0310 (gsDesign sfLDOF / ldbounds)
    found = z_boundaries((0.2, 0.4, 0.6, 0.8, 1.0))
    assert found == pytest.approx((4.8769, 3.3569, 2.6803, 2.2898, 2.0310), abs=2e-3)


def test_one_look_is_the_fixed_design_and_the_whole_alpha_is_spent_at_the_end():
    assert z_boundaries((1.0,)) == pytest.approx((1.95996,), abs=1e-4)
    assert spent(1.0) == pytest.approx(ALPHA)
    assert 0 < spent(0.2) < spent(0.5) < spent(1.0)


def test_the_looks_of_a_brownian_motion_cross_the_boundaries_5_percent_of_the_time():
    """The boundaries' promise, checked by drawing the canonical joint distribution."""
    blocks = look_blocks(2, 10)
    fractions = np.array(blocks) / 10
    bounds = np.array(z_boundaries(tuple(fractions)))
    rng = np.random.default_rng(41)
    steps = rng.normal(0, 1, (200_000, len(fractions))) * np.sqrt(
        np.diff(fractions, prepend=0.0))
    z = np.cumsum(steps, axis=1) / np.sqrt(fractions)
    rate = (np.abs(z) >= bounds).any(axis=1).mean()
    assert rate == pytest.approx(ALPHA, abs=0.003)


def test_a_boundary_on_the_t_scale_is_wider_at_few_degrees_of_freedom():
    assert t_boundary(1.96, 1e6) == pytest.approx(1.96, abs=1e-3)
    assert t_boundary(1.96, 2) > 4.0
    assert t_boundary(float("inf"), 3) == float("inf")


def test_a_design_needs_two_restarts_before_its_first_look():
    assert look_blocks(2, 4) == [2, 3, 4]
    with pytest.raises(ValueError, match="2 <= restarts <= max_restarts"):
        look_blocks(1, 10)
    with pytest.raises(ValueError, match="2 <= restarts <= max_restarts"):
        look_blocks(5, 3)


def test_a_large_effect_is_decided_early_and_identical_arms_run_to_the_maximum():
    rng = np.random.default_rng(5)
    a = list(100 * (1 + rng.normal(0, 0.02, 10)))
    b = list(200 * (1 + rng.normal(0, 0.02, 10)))
    twin = list(100 * (1 + rng.normal(0, 0.02, 10)))
    decided = first_decision(looks(a, b, 2, 10))
    assert decided is not None and decided.blocks < 10, decided
    assert decided.difference is not None and decided.difference > 0
    same = looks(a, twin, 2, 10)
    assert [look.blocks for look in same] == list(range(2, 11))
    assert first_decision(same) is None


def test_an_ab_is_not_decided_at_a_look_where_its_control_crossed_too():
    rng = np.random.default_rng(3)
    a = list(100 * (1 + rng.normal(0, 0.01, 6)))
    b = list(150 * (1 + rng.normal(0, 0.01, 6)))
    broken_twin = list(160 * (1 + rng.normal(0, 0.01, 6)))  # an A/A control that differs
    ab = looks(a, b, 2, 6)
    assert first_decision(ab) is not None
    assert first_decision(ab, looks(a, broken_twin, 2, 6)) is None
    # and a control is required where the comparison has one: none looked at, no decision
    assert first_decision(ab, []) is None


def test_looks_stop_at_the_blocks_both_arms_have():
    found = looks([1.0, 2.0, 3.0], [2.0, 3.0, 4.0, 5.0], 2, 10)
    assert [look.blocks for look in found] == [2, 3]
    assert all(look.fraction == look.blocks / 10 for look in found)


def test_looking_nine_times_at_the_fixed_boundary_would_find_far_more_than_5_percent():
    """Why the boundaries exist: the same A/A draws, judged at every look by the fixed
    design's Welch interval, find a difference several times as often."""
    from scipy import stats as scipy_stats

    from benchledger.design.sequential import welch_t

    rng = np.random.default_rng(11)
    naive = sequential = 0
    for _ in range(2000):
        a, b = (list(100 * (1 + rng.normal(0, 0.02, 10))) for _ in range(2))
        sequential += first_decision(looks(a, b, 2, 10)) is not None
        for n in range(2, 11):
            _, t, df = welch_t(a[:n], b[:n]) or (0, 0, 1)
            if abs(t) >= scipy_stats.t.isf(0.025, df):
                naive += 1
                break
    assert naive / 2000 > 0.10 and sequential / 2000 < 0.065, (naive, sequential)
