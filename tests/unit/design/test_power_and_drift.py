"""Issue #41: the detectable effect, the restarts a plan needs, the paired analysis and the
drift of restart means (benchledger.design)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from benchledger.design.drift import drift, paired
from benchledger.design.power import detectable_effect, restarts_for


def test_the_detectable_effect_is_welchs_t_quantiles_times_its_standard_error():
    a, b = [100.0, 104.0, 98.0], [101.0, 97.0, 99.0, 103.0]
    found = detectable_effect(a, b)
    va, vb = np.var(a, ddof=1) / 3, np.var(b, ddof=1) / 4
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 3)
    expected = (stats.t.ppf(0.975, df) + stats.t.ppf(0.8, df)) * np.sqrt(va + vb)
    assert found is not None
    assert found.absolute == pytest.approx(expected)
    assert found.relative == pytest.approx(expected / np.mean(a))
    assert detectable_effect([1.0], [1.0, 2.0]) is None


def test_a_plan_is_the_fewest_restarts_whose_detectable_effect_is_small_enough():
    plan = restarts_for(3.0, 2.0, 2.0)
    assert plan.restarts is not None
    n = plan.restarts

    sd = 2.0
    for k, fits in ((n, True), (n - 1, False)):
        df = 2 * (k - 1)
        value = (stats.t.ppf(0.975, df) + stats.t.ppf(0.8, df)) * np.sqrt(2 * sd**2 / k)
        assert bool(value <= 3.0) == fits
    assert restarts_for(1e-6, 2.0, 2.0).restarts is None  # beyond 1000 per arm
    with pytest.raises(ValueError):
        restarts_for(0, 1, 1)


def test_a_plan_has_the_power_it_promises():
    """At the planned n, the exact power of the equal-variance t test (noncentral t) is
    at least 80%: the planning formula is not optimistic."""
    for effect, sd in ((3.0, 2.0), (10.0, 15.0), (24.0, 15.0)):
        n = restarts_for(effect, sd, sd).restarts
        df, nc = 2 * n - 2, effect / (sd * np.sqrt(2 / n))
        crit = stats.t.ppf(0.975, df)
        power = 1 - stats.nct.cdf(crit, df, nc) + stats.nct.cdf(-crit, df, nc)
        assert power >= 0.79, (effect, sd, n, power)


def test_a_slowdown_halfway_is_drift_in_blocks_and_invisible_arm_by_arm():
    blocked = drift(["a", "b", "b", "a", "a", "b", "b", "a"], range(8),
                    [100, 100, 100, 100, 75, 75, 75, 75])
    assert blocked is not None and blocked.change < -0.2 and blocked.excludes_zero
    arm_by_arm = drift(["a"] * 4 + ["b"] * 4, range(8), [100] * 4 + [75] * 4)
    assert arm_by_arm is not None and arm_by_arm.change == pytest.approx(0, abs=1e-12)


def test_an_arms_own_trend_needs_three_restarts_for_an_interval():
    two = drift(["a", "a"], [0, 10], [100, 90])
    assert two is not None and two.change == pytest.approx(-0.1 / 0.95 * 1, rel=0.2)
    assert two.low is None and two.df == 0
    three = drift(["a"] * 3, [0, 5, 10], [100, 95, 90])
    assert three is not None and three.low is not None
    assert drift([], [], []) is None


def test_the_paired_difference_is_the_mean_of_the_blocks_differences():
    diff, differences = paired({0: 100, 1: 80, 2: 90}, {0: 103, 1: 82, 2: 94})
    assert differences == [3, 2, 4]
    low, high = stats.ttest_1samp([3, 2, 4], 0).confidence_interval(0.95)
    assert (diff.difference, diff.low, diff.high, diff.df) == pytest.approx((3, low, high, 2))
    assert paired({0: 1.0}, {0: 2.0, 1: 3.0}) is None  # one shared block
