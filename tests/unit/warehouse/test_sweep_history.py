"""The history of a recurring sweep (warehouse/history.py) on a hand-made warehouse: each
run's restart means are chosen, so every verdict can be recomputed by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import duckdb
import pandas as pd
import pytest
from scipy import stats

from benchledger.warehouse.db import insert_frame, migrate
from benchledger.warehouse.history import (
    BLOCKED,
    CONFIG_CHANGED,
    FIRST_RUN,
    IMPROVEMENT,
    NO_CHANGE,
    NO_CONTROL,
    NOT_DECIDABLE,
    REGRESSION,
    UnknownSweep,
    check_regressions,
    sweep_history,
)

START = datetime(2026, 11, 1, tzinfo=UTC)
T2 = stats.t.ppf(0.975, 1)  # two restarts: 12.7


def _entry(run: int, arm: str, mean: float, half: float | None, n: int = 2,
           config: str = "cfg-1", version: str = "sim 1", publishable: bool = True,
           metric: str = "decode_rate", unit: str = "tok/s", statistic: str = "mean") -> dict:
    return {"entry_id": f"e{run}-{arm}-{metric}", "entry_key": f"k{run}-{arm}-{metric}",
            "run_id": f"run{run}", "arm": arm, "workload": "code", "metric": metric,
            "unit": unit, "phase": "decode", "scope": "single_stream", "concurrency": 1,
            "load_point": "c1", "numerator": "output_tokens" if unit == "tok/s" else None,
            "statistic": statistic, "value": mean, "n_requests": 20, "n_restarts": n,
            "restart_mean": mean,
            "restart_ci95_low": None if half is None else mean - half,
            "restart_ci95_high": None if half is None else mean + half,
            "population": "completed_only", "evidence": "rerun", "publishable": publishable,
            "blocked_by": None if publishable else "clock_under_load",
            "server_version": version, "effective_config_sha256": config,
            "harness_version": "test", "derived_at": START}


def _warehouse(runs: list[list[dict]], controls: set[int]) -> duckdb.DuckDBPyConnection:
    """runs[i]: run i+1's entries; controls: the runs whose sweep named an A/A pair."""
    con = duckdb.connect(":memory:")
    migrate(con)
    insert_frame(con, "runs", pd.DataFrame([
        {"run_id": f"run{i + 1}", "sweep_name": "nightly", "sweep_sha256": "s",
         "harness_version": "test", "started_at": START + timedelta(days=i),
         "scheduled_for": START + timedelta(days=i) if i % 2 == 0 else None}
        for i in range(len(runs))]))
    insert_frame(con, "entries", pd.DataFrame([e for run in runs for e in run]))
    if controls:
        insert_frame(con, "comparisons", pd.DataFrame([
            {"comparison_id": f"c{i}", "run_id": f"run{i}", "role": "ab", "a": "base",
             "b": "other", "workload": "code", "metric": "decode_rate", "concurrency": 1,
             "control_a": "base", "control_b": "twin", "verdict": "no finding",
             "reason": "-", "harness_version": "test", "derived_at": START}
            for i in sorted(controls)]))
    return con


def _run(i: int, base: float, twin: float, **labels) -> list[dict]:
    return [_entry(i, "base", base, 2.0, **labels), _entry(i, "twin", twin, 2.0, **labels)]


def _verdicts(frame: pd.DataFrame, arm: str = "base") -> list[str]:
    return list(frame[frame["arm"] == arm]["change"])


def test_a_change_beyond_the_control_is_flagged_and_equals_welch_by_hand():
    con = _warehouse([_run(1, 100, 101), _run(2, 100.5, 101.5), _run(3, 80, 80.5)],
                     controls={1, 2, 3})
    frame = sweep_history(con, "nightly")
    assert _verdicts(frame) == [FIRST_RUN, NO_CHANGE, REGRESSION]
    third = frame[(frame["arm"] == "base") & (frame["run_id"] == "run3")].iloc[0]
    # sd from the half-width: 2 * sqrt(2) / t(1); Welch with equal sd and n = 2 each
    sd = 2.0 * 2 ** 0.5 / T2
    se = (2 * sd**2 / 2) ** 0.5
    half = stats.t.ppf(0.975, 2) * se
    assert third["difference"] == pytest.approx(-20.5)
    assert third["ci95_low"] == pytest.approx(-20.5 - half)
    assert third["ci95_high"] == pytest.approx(-20.5 + half)
    assert third["control_difference"] == pytest.approx(1.0)  # |101.5 - 100.5|, the larger


def test_a_difference_within_the_a_a_control_is_no_change():
    # run 3 is 3 tok/s faster (interval excludes 0) but the twins differ by 5 in run 3
    con = _warehouse([_run(1, 100, 100), _run(2, 100, 100.2), _run(3, 103, 108)],
                     controls={1, 2, 3})
    third = sweep_history(con, "nightly").query("arm == 'base' and run_id == 'run3'").iloc[0]
    assert third["ci95_low"] > 0
    assert third["change"] == NO_CHANGE
    assert "not larger than the A/A control's (5)" in third["reason"]


def test_without_a_control_nothing_is_decidable():
    con = _warehouse([_run(1, 100, 100), _run(2, 50, 50)], controls=set())
    assert _verdicts(sweep_history(con, "nightly")) == [FIRST_RUN, NO_CONTROL]


def test_a_configuration_change_breaks_the_line_and_names_what_changed():
    con = _warehouse([_run(1, 100, 100), _run(2, 150, 150, config="cfg-2"),
                      _run(3, 150, 150.5, config="cfg-2", version="sim 2")],
                     controls={1, 2, 3})
    frame = sweep_history(con, "nightly")
    base = frame[frame["arm"] == "base"]
    assert list(base["change"]) == [FIRST_RUN, CONFIG_CHANGED, CONFIG_CHANGED]
    assert list(base["segment"]) == [0, 1, 2]
    assert base.iloc[1]["config_change"] == "effective config cfg-1 -> cfg-2"
    assert base.iloc[2]["config_change"] == "server version sim 1 -> sim 2"
    assert base["previous_run_id"].isna().all()  # never compared across configurations


def test_a_blocked_run_stays_in_the_line_and_the_next_compares_past_it():
    blocked = [_entry(2, "base", 10, 2.0, publishable=False), _entry(2, "twin", 100, 2.0)]
    con = _warehouse([_run(1, 100, 100.5), blocked, _run(3, 130, 130.5)],
                     controls={1, 2, 3})
    frame = sweep_history(con, "nightly")
    base = frame[frame["arm"] == "base"]
    assert list(base["change"]) == [FIRST_RUN, BLOCKED, IMPROVEMENT]
    assert base.iloc[2]["previous_run_id"] == "run1"
    assert "clock_under_load" in base.iloc[1]["reason"]


def test_one_restart_has_no_interval_and_lower_is_better_for_latencies():
    con = _warehouse([
        [_entry(1, "base", 0.10, None, n=1), _entry(1, "twin", 0.10, None, n=1),
         _entry(1, "base", 0.1, 0.001, metric="ttft", unit="s", statistic="p50"),
         _entry(1, "twin", 0.1, 0.001, metric="ttft", unit="s", statistic="p50")],
        [_entry(2, "base", 0.20, None, n=1), _entry(2, "twin", 0.20, None, n=1),
         _entry(2, "base", 0.2, 0.001, metric="ttft", unit="s", statistic="p50"),
         _entry(2, "twin", 0.2005, 0.001, metric="ttft", unit="s", statistic="p50")]],
        controls={1, 2})
    frame = sweep_history(con, "nightly").set_index(["run_id", "arm", "metric"])
    assert frame.loc[("run2", "base", "decode_rate"), "change"] == NOT_DECIDABLE
    assert frame.loc[("run2", "base", "ttft"), "change"] == REGRESSION  # slower first token


def test_the_gate_writes_every_verdict_of_its_run_and_replaces_them_on_a_recheck():
    con = _warehouse([_run(1, 100, 101), _run(2, 80, 80.5)], controls={1, 2})
    rows = check_regressions(con, "run2", "nightly")
    assert set(rows["verdict"]) == {REGRESSION}
    check_regressions(con, "run2", "nightly")
    stored = con.execute("SELECT arm, verdict, previous_run_id FROM regression_checks "
                         "ORDER BY arm").fetchall()
    assert stored == [("base", REGRESSION, "run1"), ("twin", REGRESSION, "run1")]


def test_unknown_sweeps_and_metrics_are_refused_by_name():
    con = _warehouse([_run(1, 100, 100)], controls=set())
    with pytest.raises(UnknownSweep, match="no run of sweep 'nope'.*sweeps: nightly"):
        sweep_history(con, "nope")
    with pytest.raises(ValueError, match="not a headline metric: tpot"):
        sweep_history(con, "nightly", ["tpot"])


def test_a_null_configuration_never_equals_another_runs():
    # A server whose /version changes at every start: each run's restarts disagree, so each
    # run's effective config sha256 (and server version) is NULL. Run 3 changed a server
    # flag (50% faster): it must break the line, never be flagged as an improvement.
    unknown = {"config": None, "version": None}
    con = _warehouse([_run(1, 100, 100.5, **unknown), _run(2, 100.2, 100.4, **unknown),
                      _run(3, 150, 150.5, **unknown)], controls={1, 2, 3})
    base = sweep_history(con, "nightly").query("arm == 'base'")
    assert list(base["change"]) == [FIRST_RUN, CONFIG_CHANGED, CONFIG_CHANGED]
    assert list(base["segment"]) == [0, 1, 2]
    assert base["previous_run_id"].isna().all()  # never compared with one another
    assert list(base["config_change"])[1:] == [
        "effective config unknown (restarts disagreed) -> unknown (restarts disagreed)"] * 2
    rows = check_regressions(con, "run3", "nightly")
    assert set(rows["verdict"]) == {CONFIG_CHANGED}


def test_a_known_configuration_next_to_an_unknown_one_says_what_is_known():
    con = _warehouse([_run(1, 100, 100.5), _run(2, 100.2, 100.4, config=None),
                      _run(3, 100.1, 100.3)], controls={1, 2, 3})
    base = sweep_history(con, "nightly").query("arm == 'base'")
    assert list(base["change"]) == [FIRST_RUN, CONFIG_CHANGED, CONFIG_CHANGED]
    assert list(base["config_change"])[1:] == [
        "effective config cfg-1 -> unknown (restarts disagreed); server version sim 1 "
        "(unchanged)",
        "effective config unknown (restarts disagreed) -> cfg-1; server version sim 1 "
        "(unchanged)"]


def test_a_sure_change_under_the_smallest_change_of_interest_is_no_change():
    # run 3 is 2% slower, its interval excludes 0 and the twins agree to 0.1: a regression,
    # unless the sweep says a change under 3% is not worth a flag
    con = _warehouse([_run(1, 100, 100.1), _run(2, 100, 100.1), _run(3, 98, 98.1)],
                     controls={1, 2, 3})
    for entry in con.execute("SELECT entry_id FROM entries").fetchall():
        con.execute("UPDATE entries SET restart_ci95_low = restart_mean - 0.2, "
                    "restart_ci95_high = restart_mean + 0.2 WHERE entry_id = ?", entry)
    assert _verdicts(sweep_history(con, "nightly"))[-1] == REGRESSION
    assert _verdicts(sweep_history(con, "nightly", min_change=0.01))[-1] == REGRESSION
    third = sweep_history(con, "nightly", min_change=0.03).query(
        "arm == 'base' and run_id == 'run3'").iloc[0]
    assert third["change"] == NO_CHANGE and third["ci95_high"] < 0
    assert third["reason"] == ("the change (2.00%) is smaller than the smallest change of "
                               "interest (3.00%)")
    rows = check_regressions(con, "run3", "nightly", min_change=0.03)
    assert REGRESSION not in set(rows["verdict"])
    with pytest.raises(ValueError, match=r"fraction in \[0, 1\): found 3"):
        sweep_history(con, "nightly", min_change=3)
