"""Statistics against textbook values and scipy's own routines."""

from __future__ import annotations

import math

import pytest
from scipy import stats as scipy_stats

from benchledger.stats import t_interval, two_level


def test_t_interval_textbook_values():
    # n = 4, mean 5, sd = sqrt(20/3); t(0.975, 3) = 3.182446
    iv = t_interval([2.0, 4.0, 6.0, 8.0])
    half = 3.182446305284263 * math.sqrt(20 / 3) / 2
    assert iv.mean == 5.0 and iv.n == 4
    assert iv.low == pytest.approx(5 - half, rel=1e-9)
    assert iv.high == pytest.approx(5 + half, rel=1e-9)


def test_t_interval_matches_scipy():
    data = [25.1, 27.9, 23.4, 26.0, 24.8, 28.3, 22.9, 25.5, 26.7, 24.1, 27.2, 23.8, 25.9,
            26.4, 24.6]
    low, high = scipy_stats.t.interval(0.95, len(data) - 1, loc=sum(data) / len(data),
                                       scale=scipy_stats.sem(data))
    iv = t_interval(data)
    assert (iv.low, iv.high) == (pytest.approx(low), pytest.approx(high))


def test_single_value_has_no_interval():
    iv = t_interval([3.0])
    assert iv.mean == 3.0 and iv.low is None and iv.high is None


def test_two_level_restart_view_and_effect():
    stats = two_level({"r0": [26.0, 26.2, 25.9, 26.1], "r1": [24.0, 24.1, 23.9, 24.2]})
    assert stats.restarts.n == 2
    assert stats.restarts.mean == pytest.approx((26.05 + 24.05) / 2)
    assert stats.requests.n == 8
    assert stats.restart_effect  # the two restarts' intervals do not overlap
    # the restart-level interval (1 degree of freedom) is the honest, wider one
    assert stats.restarts.high - stats.restarts.low > stats.requests.high - stats.requests.low


def test_two_level_overlapping_restarts_have_no_effect():
    stats = two_level({"r0": [25.0, 26.0, 27.0], "r1": [25.5, 26.5, 24.5]})
    assert not stats.restart_effect


def test_welch_matches_scipy():
    from benchledger.stats import welch

    a = [24.0, 26.1, 25.2]
    b = [27.9, 30.2, 28.8, 29.5]
    result = scipy_stats.ttest_ind(b, a, equal_var=False)
    ci = result.confidence_interval(0.95)
    diff = welch(a, b)
    assert diff.difference == pytest.approx(sum(b) / 4 - sum(a) / 3)
    assert (diff.low, diff.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert diff.df == pytest.approx(result.df)
    assert diff.ratio == pytest.approx((sum(b) / 4) / (sum(a) / 3))
    assert diff.excludes_zero


def test_welch_with_one_value_a_side_claims_no_interval():
    from benchledger.stats import welch

    diff = welch([25.0], [27.0, 28.0])
    assert diff.difference == pytest.approx(2.5) and diff.low is None
    assert not diff.excludes_zero
