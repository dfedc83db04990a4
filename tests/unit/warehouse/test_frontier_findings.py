"""Frontier findings (warehouse/frontier.py) on a hand-made warehouse: each axis' verdict
is chosen, so what a finding says can be checked word for word; in particular that a
finding names the A/A control only where the sweep has one (issue #39, item 5)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import duckdb
import pandas as pd
import pytest

from benchledger.publishing.report_cards import verdicts_section
from benchledger.sweep.spec import parse_sweep
from benchledger.warehouse.db import insert_frame, migrate
from benchledger.warehouse.frontier import derive_frontier
from tests.sweeps import simulator_arm, sweep, toml

RUN = "run1"
NOW = datetime(2026, 11, 1, tzinfo=UTC)
ARMS = ("slow", "fast", "fast-twin")


def frontier_sweep(control: bool):
    comparison = {"a": "slow", "b": "fast", "metric": "frontier"}
    if control:
        comparison["control"] = ["fast", "fast-twin"]
    return parse_sweep(toml(sweep(
        "frontier", [simulator_arm(arm, {"step_ms": 8 if arm == "slow" else 2}) for arm in ARMS],
        defaults={"concurrency": [4], "restarts": 2}, comparisons=[comparison])))


def _entry(arm: str, metric: str, value: float) -> dict:
    aggregate = metric == "throughput"
    return {"entry_id": f"{arm}-{metric}", "entry_key": f"{arm}-{metric}", "run_id": RUN,
            "arm": arm, "workload": "code", "metric": metric, "unit": "tok/s",
            "phase": "decode", "scope": "aggregate" if aggregate else "per_user",
            "concurrency": 4, "load_point": "c4", "numerator": "output_tokens",
            "statistic": "mean", "value": value, "n_requests": 20, "n_restarts": 2,
            "restart_mean": value, "restart_ci95_low": value - 1,
            "restart_ci95_high": value + 1, "population": "all_submitted",
            "evidence": "rerun", "publishable": True, "harness_version": "test",
            "derived_at": NOW}


def _comparison(role: str, a: str, b: str, metric: str, verdict: str,
                control: bool) -> dict:
    return {"comparison_id": f"{role}-{a}-{b}-{metric}", "run_id": RUN, "role": role,
            "a": a, "b": b, "workload": "code", "metric": metric, "concurrency": 4,
            "load_point": "c4", "difference": 10.0, "ci95_low": 8.0, "ci95_high": 12.0,
            "control_a": "fast" if control and role == "ab" else None,
            "control_b": "fast-twin" if control and role == "ab" else None,
            "verdict": verdict, "reason": "-", "harness_version": "test",
            "derived_at": NOW}


def findings(control: bool, throughput: str, per_user: str,
             columns: str = "role, finding, reason") -> pd.DataFrame:
    """The frontier findings of one run whose A/B's axes say `throughput` and `per_user`
    (and, with a control, whose A/A pair says `no finding` on both)."""
    con = duckdb.connect(":memory:")
    migrate(con)
    insert_frame(con, "runs", pd.DataFrame([{
        "run_id": RUN, "sweep_name": "frontier", "sweep_sha256": "s",
        "harness_version": "test", "started_at": NOW}]))
    insert_frame(con, "entries", pd.DataFrame(
        [_entry(arm, metric, value) for arm in ARMS
         for metric, value in (("throughput", 100.0), ("decode_rate", 20.0))]))
    rows = [_comparison("ab", "slow", "fast", "throughput", throughput, control),
            _comparison("ab", "slow", "fast", "decode_rate", per_user, control)]
    if control:
        rows += [_comparison("control", "fast", "fast-twin", metric, "no finding", False)
                 for metric in ("throughput", "decode_rate")]
    insert_frame(con, "comparisons", pd.DataFrame(rows))
    derive_frontier(con, RUN, frontier_sweep(control))
    return con.execute(f"SELECT {columns} FROM frontier_findings ORDER BY role").df()


@pytest.mark.parametrize(("throughput", "per_user", "word"), [
    ("improvement", "no finding", "b dominates"),
    ("no finding", "regression", "a dominates"),
    ("improvement", "regression", "trade-off"),
    ("no finding", "no finding", "no finding"),
])
def test_without_a_control_no_finding_claims_one(throughput, per_user, word):
    (role, found, reason), = findings(False, throughput, per_user).itertuples(index=False)
    assert (role, found) == ("ab", word)
    assert "no A/A control: not held to one" in reason
    assert "beyond the A/A control" not in reason
    assert "what the A/A control shows" not in reason


@pytest.mark.parametrize(("throughput", "per_user", "word", "said"), [
    ("improvement", "no finding", "b dominates", "beyond the A/A control"),
    ("no finding", "no finding", "no finding", "beyond what the A/A control shows"),
])
def test_with_a_control_the_finding_is_held_to_it(throughput, per_user, word, said):
    found = findings(True, throughput, per_user).set_index("role")
    assert found.loc["ab", "finding"] == word
    assert said in found.loc["ab", "reason"]
    assert "no A/A control" not in found.loc["ab", "reason"]
    assert found.loc["control", "finding"] == "no finding"


@pytest.mark.parametrize("control", [False, True])
def test_the_reports_verdicts_say_when_a_finding_is_held_to_no_control(control):
    found = findings(control, "improvement", "no finding", columns="*")
    text = "".join(verdicts_section(pd.DataFrame(columns=["role"]), found))
    ab = re.search(r"<li class='verdict finding'.*?</li>", text, re.S)[0]
    assert "frontier: b dominates" in ab
    assert ("no A/A control: not held to one" in re.sub(r"title='[^']*'", "", ab)) is (
        not control)
