"""Drift during a sweep, and the within-block (paired) analysis of interleaved restarts
(docs/protocol.md, "The design"; trap T19: time confounded with the arm).

Drift is read from the restart means against the time each restart started, relative to
its arm's mean (so arms of different speeds share one scale): per arm, the least-squares
slope over its own restarts (an interval needs three); across the arms of a comparison,
one slope with a level per arm (ordinary least squares with arm fixed effects, an
interval from n - arms - 1 degrees of freedom), which is what the comparison rule
`ab_beyond_drift` holds a finding to. A drift is reported as the relative change over the
span the restarts covered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

from benchledger.stats import CONFIDENCE, Difference


@dataclass(frozen=True)
class Drift:
    """The relative change of restart means over `span_s` seconds (-0.25: a quarter
    slower by the end), with its interval (None bounds: too few restarts for one)."""

    change: float
    low: float | None
    high: float | None
    df: int
    span_s: float

    @property
    def excludes_zero(self) -> bool:
        return self.low is not None and self.high is not None and (
            self.low > 0 or self.high < 0)


def drift(arms: Sequence[str], started_s: Sequence[float], means: Sequence[float],
          confidence: float = CONFIDENCE) -> Drift | None:
    """One slope of relative restart means against start time (seconds, any origin), a
    level per arm. None where it cannot be read: no spread of times within an arm, or an
    arm whose mean is 0."""
    arms_ = np.asarray(arms, dtype=object)
    t = np.asarray(started_s, dtype=float)
    y = np.asarray(means, dtype=float)
    names = list(dict.fromkeys(arms_.tolist()))
    if not names:
        return None
    levels = np.column_stack([arms_ == name for name in names]).astype(float)
    arm_means = levels.T @ y / levels.sum(axis=0)
    if np.any(arm_means == 0) or len(y) < len(names) + 1:
        return None
    relative = y / (levels @ arm_means)
    span = float(t.max() - t.min())
    # centre each arm's times: the slope is read within arms only
    within = t - levels @ (levels.T @ t / levels.sum(axis=0))
    if not np.any(within != 0):
        return None
    design = np.column_stack([levels, within])
    coef, _, rank, _ = np.linalg.lstsq(design, relative, rcond=None)
    df = len(y) - rank
    slope = float(coef[-1])
    if df < 1:
        return Drift(slope * span, None, None, 0, span)
    residual = relative - design @ coef
    sigma2 = float(residual @ residual) / df
    se = float(np.sqrt(sigma2 / float(within @ within)))
    half = float(scipy_stats.t.ppf(0.5 + confidence / 2, df)) * se
    return Drift(slope * span, (slope - half) * span, (slope + half) * span, int(df), span)


def paired(blocks_a: dict[int, float], blocks_b: dict[int, float],
           confidence: float = CONFIDENCE) -> tuple[Difference, list[float]] | None:
    """The within-block difference b - a: the mean of the blocks' differences (blocks that
    hold both arms) with its t interval (n - 1 df), and the differences themselves. None
    with fewer than two shared blocks."""
    shared = sorted(set(blocks_a) & set(blocks_b))
    if len(shared) < 2:
        return None
    d = np.array([blocks_b[k] - blocks_a[k] for k in shared], dtype=float)
    mean_a = float(np.mean([blocks_a[k] for k in shared]))
    ratio = float(np.mean([blocks_b[k] for k in shared])) / mean_a if mean_a else None
    if float(np.std(d, ddof=1)) == 0:
        return Difference(float(d.mean()), float(d.mean()), float(d.mean()), None,
                          ratio), d.tolist()
    low, high = scipy_stats.ttest_1samp(d, 0.0).confidence_interval(confidence)
    return Difference(float(d.mean()), float(low), float(high), len(d) - 1.0, ratio), d.tolist()
