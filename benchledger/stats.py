"""An entry's statistics (docs/protocol.md): means with two-sided 95% Student-t intervals.

The request-level view treats every measured request as one observation; the restart-level
view treats each server restart as one (the unit of replication, T5).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats as _scipy_stats

CONFIDENCE = 0.95

# A column of the vectorised functions' results (0-d for scalar arguments).
Floats = NDArray[np.float64]


def t_bounds(mean: ArrayLike, sd: ArrayLike, n: ArrayLike,
             confidence: float = CONFIDENCE) -> tuple[Floats, Floats]:
    """Vectorised t_interval bounds for whole columns (or scalars): mean -/+ t * sd / sqrt(n)
    with n - 1 degrees of freedom; NaN where n < 2 or sd is missing (no interval)."""
    mean, sd, n = (np.asarray(x, dtype=float) for x in (mean, sd, n))
    with np.errstate(invalid="ignore", divide="ignore"):
        usable = (n >= 2) & ~np.isnan(sd)
        half = np.where(usable, _scipy_stats.t.ppf(0.5 + confidence / 2,
                                                   np.where(usable, n - 1, 1))
                        * sd / np.sqrt(np.where(usable, n, 1)), np.nan)
    return mean - half, mean + half


def sd_from_interval(mean: ArrayLike, high: ArrayLike, n: ArrayLike,
                     confidence: float = CONFIDENCE) -> Floats:
    """The sd behind t_bounds' interval, for whole columns: its half-width times sqrt(n)
    over t(n - 1); NaN where there is no interval (n < 2, a bound missing)."""
    mean, high, n = (np.asarray(x, dtype=float) for x in (mean, high, n))
    with np.errstate(invalid="ignore", divide="ignore"):
        usable = (n >= 2) & ~np.isnan(high) & ~np.isnan(mean)
        t = _scipy_stats.t.ppf(0.5 + confidence / 2, np.where(usable, n - 1, 1))
        return np.where(usable, (high - mean) * np.sqrt(np.where(usable, n, 1)) / t, np.nan)


def welch_bounds(mean_a: ArrayLike, sd_a: ArrayLike, n_a: ArrayLike, mean_b: ArrayLike,
                 sd_b: ArrayLike, n_b: ArrayLike,
                 confidence: float = CONFIDENCE) -> tuple[Floats, Floats]:
    """Vectorised welch_from_summary: the bounds of mean_b - mean_a for whole columns; NaN
    where a side has fewer than 2 values or no sd. Zero spread on both sides gives the
    difference itself as both bounds, as welch_from_summary does."""
    mean_a, sd_a, n_a, mean_b, sd_b, n_b = (
        np.asarray(x, dtype=float) for x in (mean_a, sd_a, n_a, mean_b, sd_b, n_b))
    diff = mean_b - mean_a
    with np.errstate(invalid="ignore", divide="ignore"):
        usable = (n_a >= 2) & (n_b >= 2) & ~np.isnan(sd_a) & ~np.isnan(sd_b)
        var_a, var_b = sd_a**2 / n_a, sd_b**2 / n_b
        se = np.sqrt(var_a + var_b)
        df = (var_a + var_b) ** 2 / (var_a**2 / (n_a - 1) + var_b**2 / (n_b - 1))
        spread = usable & (se > 0)
        half = np.where(spread, _scipy_stats.t.ppf(0.5 + confidence / 2,
                                                   np.where(spread, df, 1)) * se, 0.0)
    half = np.where(usable, half, np.nan)
    return diff - half, diff + half


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


# The most restarts per arm a "restarts that would decide" estimate looks for (entries and
# comparisons, warehouse.compare): beyond it, "more than any sweep would run".
MAX_RESTARTS_TO_DECIDE = 1000


def restart_interval_meaning(mean: ArrayLike, high: ArrayLike, n: ArrayLike,
                             confidence: float = CONFIDENCE,
                             ) -> tuple[Floats, NDArray[np.bool_], Floats]:
    """What an entry's interval over restart means can say, for whole columns: its degrees
    of freedom (n - 1); whether it reaches 0 or below although the quantity cannot be
    negative (two restarts of a rate: [-183, 365] tok/s, t with 1 df is 12.7), so it cannot
    even say the value is above 0; and the restarts at which it would not, if the observed
    mean and between-restart sd held (the least m >= 2 with t(m - 1) * sd / sqrt(m) < mean;
    a plug-in estimate, not a power calculation; NaN where none up to
    MAX_RESTARTS_TO_DECIDE would). sd is recovered from the interval's half-width."""
    mean, high, n = (np.asarray(x, dtype=float) for x in (mean, high, n))
    q = 0.5 + confidence / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        usable = (n >= 2) & ~np.isnan(high) & (mean > 0)
        df = np.where(n >= 2, n - 1, np.nan)
        t_now = _scipy_stats.t.ppf(q, np.where(usable, n - 1, 1))
        sd = np.where(usable, (high - mean) * np.sqrt(np.where(usable, n, 1)) / t_now, np.nan)
        reaches_zero = usable & (mean - (high - mean) <= 0)
        m = np.arange(2, MAX_RESTARTS_TO_DECIDE + 1, dtype=float)
        width = _scipy_stats.t.ppf(q, m - 1) / np.sqrt(m)  # decreasing in m
        # the first m whose width * sd falls below the mean: width < mean / sd
        first = np.searchsorted(-width, -np.where(reaches_zero, mean / sd, np.inf), side="right")
    needed = np.where(reaches_zero & (first < len(m)), m[np.minimum(first, len(m) - 1)], np.nan)
    return df, reaches_zero, needed
