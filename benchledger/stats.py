"""An entry's statistics (docs/protocol.md): means with two-sided 95% Student-t intervals.

The request-level view treats every measured request as one observation; the restart-level
view treats each server restart as one (the unit of replication, T5).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _scipy_stats

CONFIDENCE = 0.95


def t_bounds(mean, sd, n, confidence: float = CONFIDENCE):
    """Vectorised t_interval bounds for whole columns (or scalars): mean -/+ t * sd / sqrt(n)
    with n - 1 degrees of freedom; NaN where n < 2 or sd is missing (no interval)."""
    mean, sd, n = (np.asarray(x, dtype=float) for x in (mean, sd, n))
    with np.errstate(invalid="ignore", divide="ignore"):
        usable = (n >= 2) & ~np.isnan(sd)
        half = np.where(usable, _scipy_stats.t.ppf(0.5 + confidence / 2,
                                                   np.where(usable, n - 1, 1))
                        * sd / np.sqrt(np.where(usable, n, 1)), np.nan)
    return mean - half, mean + half


@dataclass(frozen=True)
class Difference:
    """b - a with a two-sided Welch t-interval (unequal variances)."""

    difference: float
    low: float | None
    high: float | None
    df: float | None
    ratio: float | None  # mean(b) / mean(a)

    @property
    def excludes_zero(self) -> bool:
        return self.low is not None and self.high is not None and (
            self.low > 0 or self.high < 0)


def welch(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> Difference:
    """Welch's interval for mean(b) - mean(a); None bounds when a side has < 2 values."""
    a, b = [float(x) for x in a], [float(x) for x in b]
    if not a or not b:
        raise ValueError("welch needs at least one value on each side")
    return welch_from_summary(_summary(a), _summary(b), confidence)


def _summary(values: list[float]) -> tuple[float, float | None, int]:
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in values) / (n - 1)) if n > 1 else None
    return mean, sd, n


def welch_from_summary(a: tuple[float, float | None, int], b: tuple[float, float | None, int],
                       confidence: float = CONFIDENCE) -> Difference:
    """Welch's interval from (mean, sd, n) of each side."""
    (mean_a, sd_a, n_a), (mean_b, sd_b, n_b) = a, b
    diff = mean_b - mean_a
    ratio = mean_b / mean_a if mean_a else None
    if n_a < 2 or n_b < 2 or sd_a is None or sd_b is None:
        return Difference(diff, None, None, None, ratio)
    var_a, var_b = sd_a**2 / n_a, sd_b**2 / n_b
    se = math.sqrt(var_a + var_b)
    if se == 0:
        return Difference(diff, diff, diff, None, ratio)
    # Welch-Satterthwaite degrees of freedom
    df = (var_a + var_b) ** 2 / (var_a**2 / (n_a - 1) + var_b**2 / (n_b - 1))
    half = _scipy_stats.t.ppf(0.5 + confidence / 2, df) * se
    return Difference(diff, diff - half, diff + half, df, ratio)
