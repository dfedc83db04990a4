"""Issue #23, item 5: a comparison states the degrees of freedom behind its interval over
restart means, and an interval that cannot decide (it spans zero) says how many restarts
per arm would decide it at the observed difference and between-restart spread."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from benchledger.stats import welch
from benchledger.warehouse.compare import MAX_RESTARTS_TO_DECIDE, interval_meaning


def _excludes_zero_at(n: int, sd_a: float, sd_b: float, difference: float) -> bool:
    """The formula of docs/protocol.md, written out: at n restarts per arm with the
    observed spreads, Welch's 95% half-width is below the observed difference."""
    var = (sd_a**2 + sd_b**2) / n
    df = (n - 1) * (sd_a**2 + sd_b**2) ** 2 / (sd_a**4 + sd_b**4)
    return stats.t.ppf(0.975, df) * math.sqrt(var) < abs(difference)


def test_two_restarts_spanning_zero_are_flagged_with_the_restarts_that_would_decide():
    a, b = [100.0, 160.0], [150.0, 240.0]  # rates: a difference of 65 tok/s, df about 1.7
    diff = welch(a, b)
    assert diff.low < 0 < diff.high  # this interval cannot decide
    meaning = interval_meaning(a, b, diff)
    assert meaning.df == pytest.approx(diff.df) and 1 <= meaning.df <= 2
    assert meaning.undecided
    n = meaning.restarts_to_decide
    assert n is not None and n > 2
    sd_a, sd_b = stats.tstd(a), stats.tstd(b)
    assert _excludes_zero_at(n, sd_a, sd_b, 65.0)
    assert not _excludes_zero_at(n - 1, sd_a, sd_b, 65.0)  # the smallest such n
    # and the estimate holds: n restarts per arm with the same means and spreads decide
    z = stats.zscore(list(range(n)), ddof=1)
    assert welch(list(130 + sd_a * z), list(195 + sd_b * z)).excludes_zero
    fewer = stats.zscore(list(range(n - 1)), ddof=1)
    assert not welch(list(130 + sd_a * fewer), list(195 + sd_b * fewer)).excludes_zero


def test_a_decided_interval_is_not_flagged():
    a, b = [100.0, 101.0, 99.0], [150.0, 151.0, 149.0]
    diff = welch(a, b)
    assert diff.low > 0
    meaning = interval_meaning(a, b, diff)
    assert meaning.df == pytest.approx(4.0)  # equal spreads, 3 + 3 restarts: n_a + n_b - 2
    assert not meaning.undecided and meaning.restarts_to_decide is None


def test_no_estimate_without_a_difference_or_a_spread():
    same = interval_meaning([10.0, 12.0], [12.0, 10.0], welch([10.0, 12.0], [12.0, 10.0]))
    assert same.undecided and same.restarts_to_decide is None  # no difference to find
    one = interval_meaning([10.0], [12.0], welch([10.0], [12.0]))
    assert one.df is None and not one.undecided and one.restarts_to_decide is None


def test_a_difference_too_small_for_any_sensible_sweep_says_so():
    a, b = [100.0, 200.0], [101.0, 199.0 + 2.0]  # a difference of 1 against a spread of 70
    meaning = interval_meaning(a, b, welch(a, b))
    assert meaning.undecided
    assert meaning.restarts_to_decide is None and meaning.beyond_cap
    assert MAX_RESTARTS_TO_DECIDE >= 100


def test_the_terminal_states_the_df_and_flags_an_undecided_interval():
    import pandas as pd

    from benchledger.publishing.report import format_comparisons

    a, b = [100.0, 160.0], [150.0, 240.0]
    diff = welch(a, b)
    meaning = interval_meaning(a, b, diff)
    row = {"role": "ab", "a": "off", "b": "on", "workload": "code", "metric": "decode_rate",
           "concurrency": 1, "verdict": "no finding", "difference": diff.difference,
           "ci95_low": diff.low, "ci95_high": diff.high, "df": diff.df, "ratio": diff.ratio,
           "control_difference": None, "a_restarts": 2, "b_restarts": 2,
           "reason": "the 95% interval of the difference over restarts includes 0",
           "undecided": meaning.undecided, "restarts_to_decide": meaning.restarts_to_decide}
    text = format_comparisons(pd.DataFrame([row]))
    assert f"(df {diff.df:.1f})" in text
    assert (f"UNDECIDED: 2 vs 2 restarts cannot decide this; about "
            f"{meaning.restarts_to_decide} restarts per arm would") in text
    decided = format_comparisons(pd.DataFrame([{**row, "undecided": False,
                                                "restarts_to_decide": None}]))
    assert "UNDECIDED" not in decided and "(df " in decided


def test_an_entry_interval_over_two_restarts_that_reaches_zero_is_explained():
    """Issue #23: two restarts of a rate give t with 1 df (12.7), e.g. [-183, 365] tok/s.
    The entry's df is stated, the interval is flagged, and the restarts that would keep it
    above 0 (at the observed mean and spread) are the least m whose t interval would."""
    import numpy as np

    from benchledger.stats import restart_interval_meaning, t_bounds

    means, sds, ns = np.array([91.0, 600.0, 50.0]), np.array([30.5, 8.0, 1.0]), [2, 3, 1]
    low, high = t_bounds(means, sds, ns)
    assert low[0] < 0 < low[1]
    df, reaches_zero, needed = restart_interval_meaning(means, high, ns)
    assert list(df[:2]) == [1, 2] and math.isnan(df[2])
    assert list(reaches_zero) == [True, False, False]
    m = int(needed[0])
    assert t_bounds(91.0, 30.5, m)[0] > 0 >= t_bounds(91.0, 30.5, m - 1)[0]
    assert math.isnan(needed[1]) and math.isnan(needed[2])


def test_the_terminal_entries_state_the_restart_df_and_the_flag():
    import pandas as pd

    from benchledger.publishing.report import format_entries
    from benchledger.stats import t_bounds

    low, high = t_bounds(91.0, 30.5, 2)
    row = {"arm": "a", "workload": "code", "metric": "decode_rate", "phase": "decode",
           "scope": "single_stream", "concurrency": 1, "numerator": "output_tokens",
           "value": 90.0, "unit": "tok/s", "ci95_low": 85.0, "ci95_high": 95.0,
           "n_requests": 30, "n_restarts": 2, "restart_mean": 91.0,
           "restart_ci95_low": float(low), "restart_ci95_high": float(high),
           "restart_effect": False, "population": "all_submitted", "drain_status": "complete",
           "counter_check": "reconciled"}
    text = format_entries(pd.DataFrame([row]))
    assert "(df 1)" in text and "restart CI reaches 0" in text
    assert "restarts would keep it above 0" in text
    calm = format_entries(pd.DataFrame([{**row, "n_restarts": 3, "restart_mean": 600.0,
                                         "restart_ci95_low": 580.0,
                                         "restart_ci95_high": 620.0}]))
    assert "(df 2)" in calm and "reaches 0" not in calm
