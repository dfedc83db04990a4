"""Issue #43, item 4: a history chart's y-axis starts at 0, so a 3% change looks like one;
a panel with something below 0 keeps matplotlib's axis and says so in its title."""

from __future__ import annotations

import pandas as pd
import pytest

from benchledger.publishing import history


def _frame(values: list[float], lows: list[float]) -> pd.DataFrame:
    return pd.DataFrame({
        "run_id": [f"run-{i}" for i in range(len(values))], "arm": "a", "segment": 0,
        "workload": "code", "metric": "decode_rate", "statistic": "mean",
        "scope": "single_stream", "numerator": "output_tokens", "load_point": "c1",
        "unit": "tok/s", "publishable": True, "value": values, "low": lows,
        "high": [v + 1 for v in values], "change": None})


@pytest.fixture
def drawn(monkeypatch):
    figures = []

    def keep(fig):
        figures.append(fig)
        return "<svg/>"

    monkeypatch.setattr(history, "svg_document", keep)
    return figures


def test_a_panel_of_positive_values_starts_at_zero(drawn):
    assert history.history_chart(_frame([100.0, 103.0, 101.0], [99.0, 102.0, 100.0]))
    ax = drawn[0].axes[0]
    assert ax.get_ylim()[0] == 0 and "(axis not from 0)" not in ax.get_title()


def test_a_panel_reaching_below_zero_says_its_axis_is_not_from_zero(drawn):
    assert history.history_chart(_frame([1.0, 2.0], [-0.5, 1.0]))
    ax = drawn[0].axes[0]
    assert ax.get_ylim()[0] < 0 and ax.get_title().endswith("(axis not from 0)")
