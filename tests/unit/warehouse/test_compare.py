"""A/B comparisons over restart means, held to an A/A control, with every verdict kept."""

from __future__ import annotations

import pytest

from benchledger.raw.layout import RunLayout
from benchledger.stats import Difference
from benchledger.warehouse.compare import decide, derive_comparisons
from tests.sweeps import command_arm, sweep
from tests.synthetic import RUN_ID, derived_warehouse, request_row, write_synthetic_run


def compare_sweep(restarts: int, control: bool) -> dict:
    comparison = {"a": "base", "b": "fast", "metric": "decode_rate"}
    if control:
        comparison["control"] = ["fast", "fast-again"]
    return sweep("cmp", [command_arm(name, f"serve --flavour {flavour} --port {{port}}")
                         for name, flavour in (("base", "a"), ("fast", "b"), ("fast-again", "b2"))],
                 defaults={"requests": 5, "restarts": restarts}, comparisons=[comparison])


def run_with(tmp_path, decode_s: dict, *, restarts=2, control=True, config_sha256=None):
    """decode_s: arm -> per-restart decode time of each 21-token request (rate = 20/s)."""
    layout = RunLayout(tmp_path / "data", RUN_ID)
    windows = {}
    for arm, per_restart in decode_s.items():
        for k, seconds in enumerate(per_restart[:restarts]):
            wid = layout.window_id(arm, k, "code", 1)
            rows = [request_row(wid, i, decode_s=seconds * (1 + 0.01 * i)) for i in range(5)]
            windows[(arm, k, "code")] = (rows, {})
    write_synthetic_run(tmp_path, compare_sweep(restarts, control), windows,
                        config_sha256=config_sha256)
    con = derived_warehouse(layout.run_dir)
    derive_comparisons(con, RUN_ID)
    return con


def verdicts(con):
    return {(role, a, b): (verdict, reason) for role, a, b, verdict, reason in con.execute(
        "SELECT role, a, b, verdict, reason FROM comparisons").fetchall()}


# base ~20 tok/s; fast ~40 tok/s; fast-again close to fast
FAST = {"base": [1.0, 1.02], "fast": [0.5, 0.51], "fast-again": [0.505, 0.5]}


def test_clear_improvement_beyond_the_control(tmp_path):
    con = run_with(tmp_path, FAST)
    found = verdicts(con)
    assert found[("ab", "base", "fast")][0] == "improvement"
    assert found[("control", "fast", "fast-again")][0] == "no finding"
    diff, low, high, ratio, a_id, b_id = con.execute(
        "SELECT difference, ci95_low, ci95_high, ratio, a_entry_id, b_entry_id "
        "FROM comparisons WHERE role = 'ab'").fetchall()[0]
    assert low < diff < high and low > 0 and ratio == pytest.approx(2.0, rel=0.05)
    arms = dict(con.execute("SELECT entry_id, arm FROM entries").fetchall())
    assert (arms[a_id], arms[b_id]) == ("base", "fast")  # lineage to both entries


def test_a_difference_no_larger_than_the_controls_is_no_finding(tmp_path):
    noisy = {"base": [1.0, 1.02], "fast": [0.9, 0.91], "fast-again": [0.6, 0.61]}
    verdict, reason = verdicts(run_with(tmp_path, noisy))[("ab", "base", "fast")]
    assert verdict == "no finding" and "A/A control" in reason


def test_slower_candidate_is_a_regression(tmp_path):
    slow = {"base": [0.5, 0.51], "fast": [1.0, 1.02], "fast-again": [1.01, 1.0]}
    assert verdicts(run_with(tmp_path, slow))[("ab", "base", "fast")][0] == "regression"


def test_one_restart_per_arm_can_only_find_nothing_or_not_decide(tmp_path):
    con = run_with(tmp_path, FAST, restarts=1, control=False)
    verdict, reason = verdicts(con)[("ab", "base", "fast")]
    assert verdict == "not decidable" and ">= 2 restarts" in reason


def test_identical_effective_configs_are_refused_as_an_ab(tmp_path):
    same = {"base": "same-sha", "fast": "same-sha"}
    verdict, reason = verdicts(run_with(tmp_path, FAST, config_sha256=same))[
        ("ab", "base", "fast")]
    assert verdict == "not decidable" and reason.startswith("refused as an A/B")


def test_variance_report_separates_within_and_between_restarts(tmp_path):
    con = run_with(tmp_path, FAST)
    within, between = con.execute(
        "SELECT cv_within_restarts, cv_between_restarts FROM variance_report "
        "WHERE arm = 'base' AND metric = 'decode_rate'").fetchall()[0]
    assert 0 < within < 0.05 and 0 < between < 0.05


@pytest.mark.parametrize(("diff", "control", "replicated", "beyond", "verdict"), [
    (Difference(5.0, 1.0, 9.0, 3.0, 1.2), None, True, None, "improvement"),
    (Difference(-5.0, -9.0, -1.0, 3.0, 0.8), None, True, None, "regression"),
    (Difference(5.0, -1.0, 11.0, 3.0, 1.2), None, True, None, "no finding"),
    (Difference(5.0, 1.0, 9.0, 3.0, 1.2), 6.0, True, False, "no finding"),
    (Difference(5.0, 1.0, 9.0, 3.0, 1.2), 4.0, True, True, "improvement"),
    (Difference(5.0, -1.0, 11.0, 30.0, 1.2), None, False, None, "no finding"),
    (Difference(5.0, 1.0, 9.0, 30.0, 1.2), None, False, None, "not decidable"),
])
def test_decide(diff, control, replicated, beyond, verdict):
    """The verdict from the difference and the comparison rules' results."""
    assert decide(diff, True, control, control is not None, replicated, beyond)[0] == verdict


def test_lower_latency_is_the_improvement():
    assert decide(Difference(-0.2, -0.3, -0.1, 3.0, 0.8), False, None, False,
                  True, None)[0] == "improvement"


def test_two_abs_held_to_one_control_write_the_control_once(tmp_path):
    """spec-off -> spec-on and spec-off -> spec-lossy, both against spec-on's twin: the
    control's row is one (it was written twice, and the second broke its primary key)."""
    layout = RunLayout(tmp_path / "data", RUN_ID)
    decode = {**FAST, "other": [0.45, 0.46]}
    windows = {}
    for arm, per_restart in decode.items():
        for k, seconds in enumerate(per_restart):
            wid = layout.window_id(arm, k, "code", 1)
            windows[(arm, k, "code")] = (
                [request_row(wid, i, decode_s=seconds * (1 + 0.01 * i)) for i in range(5)], {})
    doc = sweep("cmp", [command_arm(name, f"serve --flavour {name} --port {{port}}")
                        for name in decode],
                defaults={"requests": 5, "restarts": 2},
                comparisons=[{"a": "base", "b": b, "metric": "decode_rate",
                              "control": ["fast", "fast-again"]} for b in ("fast", "other")])
    write_synthetic_run(tmp_path, doc, windows)
    con = derived_warehouse(layout.run_dir)
    assert derive_comparisons(con, RUN_ID) == 3
    assert sorted(verdicts(con)) == [("ab", "base", "fast"), ("ab", "base", "other"),
                                     ("control", "fast", "fast-again")]
