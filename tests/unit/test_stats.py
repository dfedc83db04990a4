"""Statistics against textbook values and scipy's own routines."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from benchledger.stats import t_bounds
from benchledger.warehouse.derive import _restart_level


def test_t_bounds_textbook_values():
    # n = 4, mean 5, sd = sqrt(20/3); t(0.975, 3) = 3.182446
    low, high = t_bounds(5.0, math.sqrt(20 / 3), 4)
    half = 3.182446305284263 * math.sqrt(20 / 3) / 2
    assert low == pytest.approx(5 - half, rel=1e-9)
    assert high == pytest.approx(5 + half, rel=1e-9)


def test_t_bounds_match_scipy():
    data = [25.1, 27.9, 23.4, 26.0, 24.8, 28.3, 22.9, 25.5, 26.7, 24.1, 27.2, 23.8, 25.9,
            26.4, 24.6]
    low, high = scipy_stats.t.interval(0.95, len(data) - 1, loc=sum(data) / len(data),
                                       scale=scipy_stats.sem(data))
    ours = t_bounds(np.mean(data), np.std(data, ddof=1), len(data))
    assert ours == (pytest.approx(low), pytest.approx(high))


def test_t_bounds_over_whole_columns_claim_no_interval_below_two_values():
    low, high = t_bounds(pd.Series([3.0, 5.0, 7.0, 9.0]), pd.Series([np.nan, 1.0, 0.0, 2.0]),
                         pd.Series([1, 2, 5, 30]))
    assert np.isnan(low[0]) and np.isnan(high[0])  # one value: no interval
    assert (low[2], high[2]) == (7.0, 7.0)  # no spread: a zero-width interval
    for i, mean, sd, n in [(1, 5.0, 1.0, 2), (3, 9.0, 2.0, 30)]:
        expected = scipy_stats.t.interval(0.95, n - 1, loc=mean, scale=sd / math.sqrt(n))
        assert (low[i], high[i]) == (pytest.approx(expected[0]), pytest.approx(expected[1]))


def per_restart(values: dict[str, list[float]]) -> pd.DataFrame:
    """What queries/derive_request_stats.sql gives per restart, for one cell and metric."""
    rows = []
    for restart_id, vs in values.items():
        rows.append({"cell": 0, "metric_column": "decode_tok_s", "restart_id": restart_id,
                     "n": len(vs), "mean": np.mean(vs),
                     "sd": np.std(vs, ddof=1) if len(vs) > 1 else np.nan,
                     **{stat: 0.0 for stat in ("p50", "p90", "p99", "min", "max")}})
    frame = pd.DataFrame(rows)
    frame["ci95_low"], frame["ci95_high"] = t_bounds(frame["mean"], frame["sd"], frame["n"])
    return frame


def test_restart_level_view_and_effect():
    values = {"r0": [26.0, 26.2, 25.9, 26.1], "r1": [24.0, 24.1, 23.9, 24.2]}
    level = _restart_level(per_restart(values)).loc[(0, "decode_tok_s")]
    assert level["n_restarts"] == 2
    assert level["mean_mean"] == pytest.approx((26.05 + 24.05) / 2)
    assert level["restart_effect"]  # the two restarts' intervals do not overlap
    pooled = [v for vs in values.values() for v in vs]
    low, high = t_bounds(np.mean(pooled), np.std(pooled, ddof=1), len(pooled))
    # the restart-level interval (1 degree of freedom) is the honest, wider one
    assert level["mean_high"] - level["mean_low"] > high - low


def test_overlapping_restarts_or_single_requests_have_no_effect():
    overlapping = {"r0": [25.0, 26.0, 27.0], "r1": [25.5, 26.5, 24.5]}
    assert not _restart_level(per_restart(overlapping)).loc[(0, "decode_tok_s"),
                                                            "restart_effect"]
    # one request per restart: no interval, so no claim that restarts differ
    single = {"r0": [20.0], "r1": [40.0]}
    assert not _restart_level(per_restart(single)).loc[(0, "decode_tok_s"), "restart_effect"]


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
