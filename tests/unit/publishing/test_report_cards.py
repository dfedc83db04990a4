"""The report's first screen (issue #28): which word each verdict gets, and which entry
each headline card shows (lowest load for per-request speed and TTFT, highest for
throughput, goodput and energy)."""

from __future__ import annotations

import pandas as pd

from benchledger.publishing.report_cards import (
    cards_section,
    headline_numbers,
    verdict_word,
    verdicts_section,
)


def comparison(verdict: str, low: float, high: float) -> pd.Series:
    return pd.Series({"verdict": verdict, "ci95_low": low, "ci95_high": high})


def test_each_verdict_gets_its_word():
    assert verdict_word(comparison("improvement", 1.0, 2.0)) == ("finding: improvement",
                                                                 "finding")
    assert verdict_word(comparison("regression", -2.0, -1.0))[1] == "finding"
    # beyond 0 but not beyond the A/A control: the only 'no finding' that excludes 0
    assert verdict_word(comparison("no finding", 1.0, 2.0)) == ("refuted by the A/A control",
                                                                "refuted")
    assert verdict_word(comparison("no finding", -1.0, 2.0)) == ("no finding", "nofinding")
    assert verdict_word(comparison("not decidable", float("nan"), float("nan")))[0] == (
        "not decidable")


def test_a_run_without_comparisons_says_so_where_the_verdicts_go():
    empty = pd.DataFrame(columns=["role"])
    text = "".join(verdicts_section(empty, pd.DataFrame()))
    assert "<h2>Verdicts</h2>" in text and "No verdict: this run compared no arms" in text


def entry(entry_id, metric, statistic, scope, numerator, concurrency, value, unit="tok/s"):
    return {"entry_id": entry_id, "arm": "a", "workload": "w", "metric": metric,
            "statistic": statistic, "scope": scope, "numerator": numerator,
            "concurrency": concurrency, "requested_rate_rps": None,
            "load_point": f"c{concurrency}", "value": value, "unit": unit,
            "restart_mean": value, "restart_ci95_low": value * 0.9,
            "restart_ci95_high": value * 1.1, "n_restarts": 3, "population": "all_submitted"}


def test_cards_take_speed_at_the_lowest_load_and_throughput_at_the_highest():
    entries = pd.DataFrame([
        entry("d1", "decode_rate", "mean", "single_stream", "output_tokens", 1, 100.0),
        entry("d8", "decode_rate", "mean", "per_user", "output_tokens", 8, 60.0),
        entry("agg1", "decode_rate", "mean", "aggregate", "output_tokens", 1, 100.0),
        entry("t1", "throughput", "mean", "aggregate", "output_tokens", 1, 100.0),
        entry("t8", "throughput", "mean", "aggregate", "output_tokens", 8, 480.0),
        entry("t8io", "throughput", "mean", "aggregate", "input_plus_output_tokens", 8, 900.0),
        entry("p50", "ttft", "p50", "single_stream", None, 1, 0.02, "s"),
        entry("p50c8", "ttft", "p50", "per_user", None, 8, 0.09, "s"),
        entry("p90", "ttft", "p90", "single_stream", None, 1, 0.03, "s"),
        entry("g8", "goodput", "mean", "aggregate", "output_tokens", 8, 400.0),
        entry("gr8", "goodput", "mean", "aggregate", "requests_meeting_all_slos", 8, 3.0,
              "req/s"),
    ])
    shown = {label: e["entry_id"] for _, _, label, e in headline_numbers(entries)}
    assert shown == {"single-stream decode": "d1", "aggregate throughput": "t8",
                     "TTFT p50": "p50", "TTFT p90": "p90", "goodput": "g8"}
    # no energy entry: no energy line; each line says its interval, restarts and labels
    text = "".join(cards_section(entries))
    assert "<span class='what'>energy per token</span>" not in text
    assert "[432, 528]" in text and "3 restarts · all_submitted · output_tokens · c=8" in text


def test_simulated_arms_are_named_whether_started_as_simulator_or_by_command():
    from benchledger.publishing.report_html import SIMULATOR_VERSION, simulated_arms
    from benchledger.simulator.engine import VERSION

    assert VERSION.startswith(SIMULATOR_VERSION)  # publishing does not import the simulator
    servers = pd.DataFrame({
        "arm": ["sim", "cmd-sim", "vllm", "unknown"],
        "server_kind": ["simulator", "command", "command", None],
        "server_version": [VERSION, VERSION, "vllm 0.32.0", None]})
    assert simulated_arms(servers) == ["sim", "cmd-sim"]


def control(verdict: str, metric: str) -> dict:
    return {"role": "control", "a": "x", "b": "x-twin", "workload": "w", "metric": metric,
            "load_point": "c1", "concurrency": 1, "verdict": verdict}


def test_every_control_is_shown_with_its_own_verdict_in_one_line():
    controls = pd.DataFrame([control("no finding", "decode_rate"),
                             control("not decidable", "throughput")])
    text = "".join(verdicts_section(controls, pd.DataFrame()))
    items = text.count("<li class='verdict")
    assert items == 1, text
    assert "<li class='verdict undecidable'" in text  # one control cannot decide
    assert ("x-twin vs x: NO FINDING on w decode_rate c=1; "
            "x-twin vs x: NOT DECIDABLE on w throughput c=1") in text
