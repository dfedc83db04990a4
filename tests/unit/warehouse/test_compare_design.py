"""Issue #41 items 2-3 in the warehouse: every comparison says what its restarts could
have detected, is `underpowered` below its smallest effect, carries the paired analysis
of its blocks, and a finding no larger than the drift found is no finding."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from benchledger.raw.layout import RunLayout
from benchledger.warehouse.compare import derive_comparisons
from tests.sweeps import command_arm, sweep
from tests.synthetic import RUN_ID, derived_warehouse, request_row, write_synthetic_run

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def run_with(tmp_path, decode_s: dict, *, smallest_effect=None, order=None,
             restart_order="blocked"):
    """decode_s: arm -> per-restart decode seconds of each 21-token request; order: the
    arms' restarts in the order they ran ((arm, k) each, one minute apart, restart k in
    block k), recorded as a blocked sweep would."""
    comparison = {"a": "base", "b": "fast", "metric": "decode_rate"}
    if smallest_effect is not None:
        comparison["smallest_effect"] = smallest_effect
    doc = sweep("design", [command_arm(name, f"serve --flavour {name} --port {{port}}")
                           for name in decode_s],
                defaults={"requests": 5, "restarts": len(next(iter(decode_s.values())))},
                comparisons=[comparison])
    layout = RunLayout(tmp_path / "data", RUN_ID)
    windows = {}
    for arm, per_restart in decode_s.items():
        for k, seconds in enumerate(per_restart):
            wid = layout.window_id(arm, k, "code", 1)
            rows = [request_row(wid, i, decode_s=seconds * (1 + 0.01 * i)) for i in range(5)]
            windows[(arm, k, "code")] = (rows, {})
    fields = {slot: {"started_at": (T0 + timedelta(minutes=i)).isoformat(), "block": slot[1],
                     "block_position": i % 2, "restart_order": restart_order}
              for i, slot in enumerate(order or [])}
    write_synthetic_run(tmp_path, doc, windows, restart_fields=fields)
    con = derived_warehouse(layout.run_dir)
    derive_comparisons(con, RUN_ID)
    return con


def ab(con) -> dict:
    frame = con.execute("SELECT * FROM comparisons WHERE role = 'ab'").df()
    assert len(frame) == 1
    return frame.iloc[0].to_dict()


NOISY = {"base": [1.0, 0.8], "fast": [0.9, 1.05]}


def test_a_no_finding_says_what_it_could_have_detected(tmp_path):
    row = ab(run_with(tmp_path, NOISY))
    assert row["verdict"] == "no finding"
    assert row["detectable_relative"] > 0.1  # two noisy restarts per arm detect little
    assert f"could have detected >= {100 * row['detectable_relative']:.3g}%" in row["reason"]
    assert row["detectable_effect"] == pytest.approx(
        row["detectable_relative"] * row["a_mean"])


def test_below_its_smallest_effect_a_no_finding_is_underpowered(tmp_path):
    row = ab(run_with(tmp_path, NOISY, smallest_effect=0.02))
    assert row["verdict"] == "underpowered" and row["smallest_effect"] == 0.02
    assert "smallest effect of interest (2%)" in row["reason"]


def test_a_finding_keeps_its_verdict_and_its_detectable_effect(tmp_path):
    row = ab(run_with(tmp_path, {"base": [1.0, 1.02], "fast": [0.5, 0.51]},
                      smallest_effect=0.02))
    assert row["verdict"] == "improvement" and row["detectable_relative"] is not None


ABBA = [("base", 0), ("fast", 0), ("fast", 1), ("base", 1), ("base", 2), ("fast", 2),
        ("fast", 3), ("base", 3)]


def test_blocks_give_a_paired_difference_beside_welchs(tmp_path):
    row = ab(run_with(tmp_path, {"base": [1.0, 1.01, 0.99, 1.0],
                                 "fast": [0.5, 0.505, 0.49, 0.5]}, order=ABBA))
    assert row["paired_blocks"] == 4 and row["paired_df"] == 3
    assert row["paired_ci95_low"] < row["paired_difference"] < row["paired_ci95_high"]
    assert row["paired_difference"] == pytest.approx(row["difference"], rel=0.05)
    assert row["restart_order"] == "blocked"


def test_a_finding_smaller_than_the_drift_is_no_finding_naming_the_drift(tmp_path):
    """Arm by arm on a machine slowing 2% a restart: base's four restarts, then fast's
    (the same speed): Welch finds fast slower, and the drift (read within each arm) is
    larger than that difference."""
    rates = {"base": [100, 98, 96, 94], "fast": [92, 90, 88, 86]}
    order = [(arm, k) for arm in rates for k in range(4)]
    con = run_with(tmp_path, {arm: [20 / r for r in per] for arm, per in rates.items()},
                   order=order, restart_order="arm_by_arm")
    row = ab(con)
    assert row["drift"] < -0.1 and row["drift_ci95_high"] < 0
    assert row["verdict"] == "no finding", row["reason"]
    assert "drifted by" in row["reason"] and "(T19)" in row["reason"]
    assert "arm by arm" in row["reason"]
    expected, found = con.execute(
        "SELECT expected, found FROM validations WHERE expectation = 'ab_beyond_drift' "
        "AND NOT success").fetchone()
    assert "drift" in expected and "vs drift" in found


def test_a_plan_reads_the_runs_spread_and_names_the_restarts_needed(tmp_path):
    from benchledger.design.power import restarts_for
    from benchledger.publishing.plan import format_plan, plan

    con = run_with(tmp_path, NOISY)
    run, frame = plan(con, "design", 0.05)
    assert run == RUN_ID and len(frame) == 1
    row = frame.iloc[0]
    expected = restarts_for(0.05 * abs(row["a_mean"]), row["a_sd_restart_mean"],
                            row["b_sd_restart_mean"]).restarts
    assert row["restarts_per_arm"] == expected and expected > 2
    # the spread split: within restarts over m requests, and between instances
    assert row["a_requests_per_restart"] == 5 and row["a_sd_within"] > 0
    text = format_plan(run, frame)
    assert f"{int(expected)} restarts per arm" in text and "between instances" in text
    with pytest.raises(LookupError, match="no run of sweep 'nope'"):
        plan(con, "nope", 0.05)
