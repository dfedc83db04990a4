"""What a comparison over restart means could have detected, and how many restarts a
question needs (docs/protocol.md, "Detectable effect" and "Planning restarts").

The minimum detectable effect (MDE) of a two-sided test at level alpha with power 1 - beta
is (t(1 - alpha/2, df) + t(1 - beta, df)) * SE, SE the standard error of the difference
and df its degrees of freedom: the difference that, were it the truth, the test would find
with probability 1 - beta (Cohen 1988, "Statistical Power Analysis", ch. 2; the t form of
the usual normal approximation, which keeps the small-df cost that restarts carry: with two
restarts per arm and Welch's df near 2, t(0.975) = 4.30 and t(0.80) = 1.06). The power this
promises is checked by simulation (benchmarks/design_simulation.py), not assumed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

from benchledger.stats import CONFIDENCE

POWER = 0.80
# The most restarts per arm a plan looks for; beyond it: "more than any sweep would run".
MAX_PLANNED_RESTARTS = 1000


@dataclass(frozen=True)
class Detectable:
    """The smallest true difference (b - a, in the metric's unit; and relative to a's
    mean) the comparison would have found with probability `power`."""

    absolute: float
    relative: float | None  # None where a's mean is 0
    df: float


def _multiplier(df: float | np.ndarray, confidence: float, power: float) -> np.ndarray:
    return np.asarray(scipy_stats.t.ppf(0.5 + confidence / 2, df)
                      + scipy_stats.t.ppf(power, df))


def welch_se_df(var_a: float, n_a: int, var_b: float, n_b: int) -> tuple[float, float]:
    """Welch's standard error of mean(b) - mean(a) and its Welch-Satterthwaite df."""
    va, vb = var_a / n_a, var_b / n_b
    se = math.sqrt(va + vb)
    if se == 0:
        return 0.0, float(n_a + n_b - 2)
    return se, (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))


def detectable_effect(a: Sequence[float], b: Sequence[float],
                      confidence: float = CONFIDENCE, power: float = POWER,
                      ) -> Detectable | None:
    """The MDE of Welch's interval over restart means a and b at their observed spread;
    None with fewer than 2 restarts on a side (no spread to read)."""
    if len(a) < 2 or len(b) < 2:
        return None
    se, df = welch_se_df(float(np.var(a, ddof=1)), len(a), float(np.var(b, ddof=1)), len(b))
    absolute = float(_multiplier(df, confidence, power)) * se
    mean_a = float(np.mean(a))
    return Detectable(absolute, absolute / abs(mean_a) if mean_a else None, df)


def paired_detectable(differences: Sequence[float], reference: float,
                      confidence: float = CONFIDENCE, power: float = POWER,
                      ) -> Detectable | None:
    """The MDE of the within-block (paired) interval over the blocks' differences."""
    n = len(differences)
    if n < 2:
        return None
    se = float(np.std(differences, ddof=1)) / math.sqrt(n)
    absolute = float(_multiplier(n - 1, confidence, power)) * se
    return Detectable(absolute, absolute / abs(reference) if reference else None, n - 1)


@dataclass(frozen=True)
class Plan:
    """Restarts per arm that detect `effect` with the planned power, if the spread the plan
    rests on holds. restarts None: none up to MAX_PLANNED_RESTARTS would."""

    restarts: int | None
    effect: float  # absolute, in the metric's unit
    sd_a: float  # sd of a restart mean, each arm (what the plan rests on)
    sd_b: float


def restarts_for(effect: float, sd_a: float, sd_b: float, confidence: float = CONFIDENCE,
                 power: float = POWER) -> Plan:
    """The least n >= 2 restarts per arm whose Welch MDE, at between-restart sds sd_a and
    sd_b, is at most `effect` (> 0)."""
    if effect <= 0:
        raise ValueError(f"the effect to detect must be > 0, got {effect}")
    n = np.arange(2, MAX_PLANNED_RESTARTS + 1, dtype=float)
    va, vb = sd_a**2, sd_b**2
    if va + vb == 0:
        return Plan(2, effect, sd_a, sd_b)
    df = (n - 1) * (va + vb) ** 2 / (va**2 + vb**2)
    mde = _multiplier(df, confidence, power) * np.sqrt((va + vb) / n)
    enough = np.flatnonzero(mde <= effect)
    return Plan(int(n[enough[0]]) if len(enough) else None, effect, sd_a, sd_b)
