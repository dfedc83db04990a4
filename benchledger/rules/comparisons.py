"""The comparisons suite: one row per A/B (the A/A control row is not held to these rules).

A row: comparison_id, a, b, their effective configs (a_config, b_config; NULL when an
arm's restarts disagree or did not report one), a_restarts and b_restarts (restart means
available), difference (b - a) and control_difference (NULL without a measured A/A
control), relative_difference (|b - a| over a's mean) and significant_drift (|relative
drift| of the arms' restart means over the sweep where its interval excludes 0; NULL
otherwise: benchledger.design.drift).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from benchledger.rules.core import (
    LIMIT_VERDICT,
    MIN_RESTARTS_FOR_CLAIM,
    REFUSE_COMPARISON,
    Builder,
    Frame,
    Kw,
    Rows,
    Rule,
    SuiteFrame,
    gx,
)
from benchledger.rules.frame import NOT_APPLICABLE, numbers, show

if TYPE_CHECKING:
    import pandas as pd

SUITE = SuiteFrame(
    "comparisons", frame="comparisons", subject="comparison_id",
    required=("comparison_id", "a_config", "b_config", "a_restarts", "b_restarts",
              "difference", "control_difference", "relative_difference",
              "significant_drift"),
    optional=("equivalence_found",),
    numeric=("divergent_share", "divergence_bound"))


def _configs_identical(frame: Frame) -> pd.Series:
    known = frame["a_config"].notna() & frame["b_config"].notna()
    return (known & (frame["a_config"] == frame["b_config"])).astype(bool)


def _short(config: Any) -> str:
    return "unknown" if config is None or (isinstance(config, float) and math.isnan(config)) \
        else str(config)[:12]


def _observe_configs(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    found = "; ".join(
        f"{frame.at[row, 'a']} {_short(frame.at[row, 'a_config'])}, "
        f"{frame.at[row, 'b']} {_short(frame.at[row, 'b_config'])}"
        + (" (identical)" if row in bad else "") for row in rows)
    return "arms with different effective configs", found or NOT_APPLICABLE


AB_ARMS_DIFFER = Rule(
    name="ab_arms_differ", traps=("T11",), applies_to="comparison", effect=REFUSE_COMPARISON,
    summary="an A/B compares arms that differ: identical server settings are refused when "
            "the sweep is parsed, identical effective configs when the run is compared "
            "(name such arms as an A/A control instead)",
    check=gx(SUITE, "ExpectColumnValuesToBeInSet",
             column="effective_configs_identical", value_set=[False],
             columns={"effective_configs_identical": _configs_identical},
             observe=_observe_configs))


def _fewest_restarts(frame: Frame) -> pd.Series:
    return frame[["a_restarts", "b_restarts"]].min(axis=1)


def _observe_restarts(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    found = "; ".join(f"{frame.at[row, 'a']} {frame.at[row, 'a_restarts']}, "
                      f"{frame.at[row, 'b']} {frame.at[row, 'b_restarts']}" for row in rows)
    return f"restarts per arm >= {kw['min_value']}", found or NOT_APPLICABLE


AB_RESTARTS_REPLICATED = Rule(
    name="ab_restarts_replicated", traps=("T5",), applies_to="comparison",
    effect=LIMIT_VERDICT,
    summary="an improvement or regression needs >= 2 restarts per arm; with fewer the "
            "verdict is at best 'no finding'",
    threshold=f"restarts per arm >= {MIN_RESTARTS_FOR_CLAIM}",
    threshold_source="the protocol (T5)",
    check=gx(SUITE, "ExpectColumnValuesToBeBetween",
             column="fewest_restarts", min_value=MIN_RESTARTS_FOR_CLAIM,
             columns={"fewest_restarts": _fewest_restarts}, observe=_observe_restarts))


def _absolute(column: str) -> Builder:
    def build(frame: Frame) -> pd.Series:
        return numbers(frame[column]).abs()

    return build


def _observe_control(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    checked = [row for row in rows
               if frame.loc[row, [kw["column_A"], kw["column_B"]]].notna().all()]
    found = "; ".join(f"|{show(frame.at[row, 'difference'])}| vs "
                      f"|{show(frame.at[row, 'control_difference'])}|" for row in checked)
    return ("|difference| > |A/A control difference|",
            found or f"{NOT_APPLICABLE} (no control difference measured)")


AB_BEYOND_CONTROL = Rule(
    name="ab_beyond_control", traps=("T11",), applies_to="comparison", effect=LIMIT_VERDICT,
    summary="where an A/A control was measured, the A/B difference must be larger than the "
            "control's; otherwise the verdict is 'no finding'",
    threshold="|b - a| > |control difference|",
    threshold_source="the A/A control named in the sweep's [[comparisons]]",
    check=gx(SUITE, "ExpectColumnPairValuesAToBeGreaterThanB",
             column_A="abs_difference", column_B="abs_control_difference",
             or_equal=False, ignore_row_if="either_value_is_missing",
             columns={"abs_difference": _absolute("difference"),
                      "abs_control_difference": _absolute("control_difference")},
             observe=_observe_control))


def _observe_drift(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    checked = [row for row in rows if frame.loc[row, "significant_drift"] is not None
               and frame.loc[row, ["relative_difference", "significant_drift"]].notna().all()]
    found = "; ".join(f"difference {100 * float(frame.at[row, 'relative_difference']):.3g}% "
                      f"vs drift {100 * float(frame.at[row, 'significant_drift']):.3g}% "
                      "over the sweep" for row in checked)
    return ("|relative difference| > |drift of the restart means over the sweep| (where a "
            "drift was found)", found or f"{NOT_APPLICABLE} (no drift found)")


AB_BEYOND_DRIFT = Rule(
    name="ab_beyond_drift", traps=("T19",), applies_to="comparison", effect=LIMIT_VERDICT,
    summary="where the arms' restart means drifted during the sweep (a slope against start "
            "time whose interval excludes 0), the A/B difference must be larger than that "
            "drift; otherwise the verdict is 'no finding', naming the drift",
    threshold="|b - a| / |a| > |drift over the sweep|",
    threshold_source="benchledger.design.drift: one slope over both arms' restarts, a level "
                     "per arm, 95% interval",
    check=gx(SUITE, "ExpectColumnPairValuesAToBeGreaterThanB",
             column_A="relative_difference", column_B="significant_drift",
             or_equal=False, ignore_row_if="either_value_is_missing",
             observe=_observe_drift))


def _observe_equivalence(kw: Kw, frame: Frame, rows: Rows, bad: Rows) -> tuple[str, str]:
    checked = [row for row in rows
               if frame.loc[row, ["divergent_share", "divergence_bound"]].notna().all()]
    found = "; ".join(str(frame.at[row, "equivalence_found"]) for row in checked)
    return ("answers changed on a share of prompts <= the A/A control's 95% upper bound "
            "(no control: none changed)",
            found or f"{NOT_APPLICABLE} (answers not compared)")


OUTPUTS_EQUIVALENT = Rule(
    name="outputs_equivalent", traps=("T11",), applies_to="comparison", effect=LIMIT_VERDICT,
    summary="where a comparison checks answers (both arms at temperature 0, or equivalence "
            "= true), b may change the answers of no larger a share of the prompts both "
            "arms answered than the A/A control's own divergence allows (the upper end of "
            "its 95% interval; without a control, none); otherwise a faster or slower b is "
            "not the same computation and the verdict is 'no finding', naming the prompts",
    threshold="changed prompts / prompts <= upper 95% bound of the control's share",
    threshold_source="the A/A control named in the sweep's [[comparisons]] (exact binomial "
                     "interval); without one, zero",
    check=gx(SUITE, "ExpectColumnPairValuesAToBeGreaterThanB",
             column_A="divergence_bound", column_B="divergent_share",
             or_equal=True, ignore_row_if="either_value_is_missing",
             observe=_observe_equivalence))
