"""The design columns of a comparison (issue #41; docs/protocol.md, "The design"): what
its restarts could have detected, the within-block (paired) difference beside Welch's,
and the drift of restart means over the sweep. warehouse/compare.py calls design_values
for every A/B and A/A it measures; the comparison rule `ab_beyond_drift` and the verdict
read the result."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from benchledger.design.drift import Drift, drift, paired
from benchledger.design.power import detectable_effect, paired_detectable
from benchledger.design.sequential import Look, first_decision, looks
from benchledger.sweep.order import ARM_BY_ARM


@dataclass(frozen=True)
class DesignInputs:
    """One arm's restart means with where and when each ran."""

    means: list[float]
    blocks: list[int | None]
    started_s: list[float | None]


def inputs(restart_means: pd.DataFrame, restarts: pd.DataFrame) -> DesignInputs:
    """restart_means (restart_id, mean) joined to the run's restarts (restart_id, block,
    started_at)."""
    joined = restart_means[["restart_id", "mean"]].merge(
        restarts[["restart_id", "block", "started_at"]], on="restart_id", how="left")
    started = pd.to_datetime(joined["started_at"], utc=True)
    seconds = (started - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
    return DesignInputs(
        [float(x) for x in joined["mean"]],
        [None if pd.isna(b) else int(b) for b in joined["block"]],
        [None if pd.isna(s) else float(s) for s in seconds])


def _drift_columns(prefix: str, found: Drift | None) -> dict[str, Any]:
    return {f"{prefix}drift": found.change if found else None,
            f"{prefix}drift_ci95_low": found.low if found else None,
            f"{prefix}drift_ci95_high": found.high if found else None}


def _timed(sides: list[tuple[str, DesignInputs]]) -> tuple[list[str], list[float], list[float]]:
    arms, times, means = [], [], []
    for name, side in sides:
        for mean, started in zip(side.means, side.started_s, strict=True):
            if started is not None:
                arms.append(name)
                times.append(started)
                means.append(mean)
    return arms, times, means


def design_values(a: DesignInputs, b: DesignInputs, restart_order: str | None,
                  smallest_effect: float | None) -> dict[str, Any]:
    """The comparison's design columns (migration 0027)."""
    out: dict[str, Any] = {"restart_order": restart_order, "smallest_effect": smallest_effect}
    found = detectable_effect(a.means, b.means)
    out.update(detectable_effect=found.absolute if found else None,
               detectable_relative=found.relative if found else None)
    by_block = [{blk: m for m, blk in zip(side.means, side.blocks, strict=True)
                 if blk is not None} for side in (a, b)]
    within = paired(by_block[0], by_block[1]) if restart_order != ARM_BY_ARM else None
    if within is not None:
        diff, differences = within
        reference = sum(by_block[0].values()) / len(by_block[0])
        paired_mde = paired_detectable(differences, reference)
        out.update(paired_difference=diff.difference, paired_ci95_low=diff.low,
                   paired_ci95_high=diff.high, paired_df=diff.df,
                   paired_blocks=len(differences),
                   paired_detectable_effect=paired_mde.absolute if paired_mde else None)
    shared = drift(*_timed([("a", a), ("b", b)])) if len(a.means) + len(b.means) >= 3 \
        else None
    out.update(_drift_columns("", shared), drift_span_s=shared.span_s if shared else None)
    for prefix, side in (("a_", a), ("b_", b)):
        own = drift(*_timed([("arm", side)])) if len(side.means) >= 2 else None
        out.update(_drift_columns(prefix, own))
    return out


def significant_drift(values: dict[str, Any]) -> float | None:
    """|drift| where its interval excludes 0 (what ab_beyond_drift holds a finding to);
    None where no drift was found."""
    low, high = values.get("drift_ci95_low"), values.get("drift_ci95_high")
    if low is None or high is None or pd.isna(low) or pd.isna(high) or (low <= 0 <= high):
        return None
    return abs(float(values["drift"]))


def _blocked(side: DesignInputs) -> tuple[list[float], list[int]]:
    pairs = [(m, blk) for m, blk in zip(side.means, side.blocks, strict=True) if blk is not None]
    return [m for m, _ in pairs], [blk for _, blk in pairs]


def side_looks(a: DesignInputs, b: DesignInputs, minimum: int, maximum: int) -> list[Look]:
    """The sequential design's looks at b against a (benchledger.design.sequential)."""
    (a_means, a_blocks), (b_means, b_blocks) = _blocked(a), _blocked(b)
    return looks(a_means, b_means, minimum, maximum, a_blocks, b_blocks)


def finite(value: float | None) -> float | None:
    """A boundary as a column: None where it is infinite (no error left to spend)."""
    return None if value is None or not math.isfinite(value) else float(value)


def sequential_values(a: DesignInputs, b: DesignInputs,
                      control: tuple[DesignInputs, DesignInputs] | None,
                      minimum: int, maximum: int) -> dict[str, Any]:
    """A sequential sweep's columns of a comparison (migration 0028): its looks, the look
    that decided it (None: none did), and the statistic and boundary of that look, else of
    the last. An A/B with a control is decided only where the control, looked at after the
    same blocks, did not cross (benchledger.design.sequential.decided)."""
    ab = side_looks(a, b, minimum, maximum)
    controls = side_looks(*control, minimum, maximum) if control else None
    decided = first_decision(ab, controls)
    shown = decided or (ab[-1] if ab else None)
    return {"max_restarts": maximum, "sequential_looks": len(ab),
            "decided_at_blocks": decided.blocks if decided else None,
            "sequential_blocks": shown.blocks if shown else None,
            "sequential_difference": shown.difference if shown else None,
            "sequential_statistic": shown.statistic if shown else None,
            "sequential_boundary": finite(shown.boundary) if shown else None}
