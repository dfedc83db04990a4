"""Sequential verdicts: when a comparison may stop spending restarts (issue #41, item 5;
docs/protocol.md, "Sequential verdicts").

A sweep with `max_restarts` looks at its comparisons after every block from its minimum
`restarts` on. Looking repeatedly and stopping at the first interval that excludes 0 would
find a difference between two identical arms far more often than 5% (P. Armitage, C. K.
McPherson and B. C. Rowe, "Repeated significance tests on accumulating data", JRSS A 132,
1969). Each look is therefore held to a group-sequential boundary with the error spent
as the O'Brien-Fleming-type function of K. K. G. Lan and D. L. DeMets ("Discrete
sequential boundaries for clinical trials", Biometrika 70, 1983), on each side half of
alpha (symmetric two-sided boundaries, as gsDesign's sfLDOF and ldbounds spend it):

    alpha(tau) = 2 x (2 - 2 Phi(z(1 - alpha / 4) / sqrt(tau))),  tau = blocks / max_restarts

which spends almost nothing early (a look at 2 of 10 blocks needs |z| > 4.9) and keeps the
last boundary near the fixed design's (2.03 against 1.96 for five looks), so a sweep that
runs to its maximum loses little power for the chance to stop early on a large effect.
The boundaries c_k solve P0(|Z_j| < c_j for j < k, |Z_k| >= c_k) = alpha(tau_k) -
alpha(tau_(k-1)) for the canonical joint distribution of the looks' statistics (a Brownian
motion observed at the fractions), by the recursive numerical integration of Armitage,
McPherson and Rowe, which is what gsDesign and ldbounds compute.

The statistic is the decision rule's own (Welch's t over the two arms' restart means,
docs/protocol.md "Which analysis decides"); its degrees of freedom are few, so each
boundary is carried to the t scale by its nominal significance level (C. Jennison and B.
W. Turnbull, "Group Sequential Methods with Applications to Clinical Trials", 2000,
section 3.8: the "significance level approach"), at the conservative min(n_a, n_b) - 1
degrees of freedom of P. L. Hsu (1938) and H. Scheffe ("Practical solutions of the
Behrens-Fisher problem", JASA 65, 1970), not Welch-Satterthwaite's: with those, the looks'
false findings came to 5.3-5.5% over 10,000 A/A experiments (random, underestimated df at
every look), with Hsu's 4.0% (benchmarks/design_simulation.py measures it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import optimize
from scipy import stats as scipy_stats

from benchledger.stats import CONFIDENCE

ALPHA = 1 - CONFIDENCE
# Grid points per unit of the score's standard deviation in the recursive integration:
# the boundaries agree with published tables (ldbounds, gsDesign) to 1e-3 at this density.
_POINTS_PER_SD = 40


def spent(fraction: float, alpha: float = ALPHA) -> float:
    """The error (both sides) spent by information fraction `fraction` (Lan-DeMets,
    O'Brien-Fleming type, alpha / 2 on each side)."""
    if fraction <= 0:
        return 0.0
    z = scipy_stats.norm.isf(alpha / 4)
    return float(2 * (2 * scipy_stats.norm.sf(z / math.sqrt(min(fraction, 1.0)))))


@lru_cache(maxsize=256)
def z_boundaries(fractions: tuple[float, ...], alpha: float = ALPHA) -> tuple[float, ...]:
    """Two-sided boundaries on the z scale for looks at `fractions` (increasing, in
    (0, 1]): a look k whose |z| reaches c_k stops with a finding. inf: no error left to
    spend at that look (a fraction no larger than the one before)."""
    if any(b <= a for a, b in zip(fractions, fractions[1:], strict=False)) or not fractions \
            or fractions[0] <= 0 or fractions[-1] > 1 + 1e-12:
        raise ValueError(f"look fractions must increase within (0, 1], got {fractions}")
    boundaries: list[float] = []
    grid = weights = density = None  # the score's sub-density at the last look, on a grid
    previous_fraction, previous_spent = 0.0, 0.0
    for fraction in fractions:
        increment = spent(fraction, alpha) - previous_spent
        if grid is None or weights is None or density is None:  # the first look: exact
            c = float(scipy_stats.norm.ppf(1 - increment / 2))
        else:
            step = fraction - previous_fraction
            c = _solve_boundary(grid, weights, density, step, fraction, increment)
        boundaries.append(c)
        grid, weights, density = _continue(grid, weights, density, fraction,
                                           fraction - previous_fraction, c)
        previous_fraction, previous_spent = fraction, previous_spent + increment
    return tuple(boundaries)


def _crossing(grid: np.ndarray, weights: np.ndarray, density: np.ndarray, step: float,
              bound: float) -> float:
    """P(the score continued so far and is beyond +-bound after `step` more information)."""
    sd = math.sqrt(step)
    beyond = (scipy_stats.norm.sf((bound - grid) / sd)
              + scipy_stats.norm.cdf((-bound - grid) / sd))
    return float(np.sum(weights * density * beyond))


def _solve_boundary(grid: np.ndarray, weights: np.ndarray, density: np.ndarray,
                    step: float, fraction: float, increment: float) -> float:
    if increment <= 0:
        return math.inf
    scale = math.sqrt(fraction)  # c on the z scale is bound / sqrt(fraction) on the score's
    total = _crossing(grid, weights, density, step, 0.0)
    if increment >= total:
        return 0.0
    return float(optimize.brentq(
        lambda c: _crossing(grid, weights, density, step, c * scale) - increment,
        0.0, 40.0, xtol=1e-10))


def _continue(grid: np.ndarray | None, weights: np.ndarray | None,
              density: np.ndarray | None, fraction: float, step: float,
              c: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The score's sub-density at `fraction` on the paths that have not stopped, on a
    Simpson grid over the continuation region (-c, c) x sqrt(fraction)."""
    bound = (c if math.isfinite(c) else 12.0) * math.sqrt(fraction)
    points = 2 * int(math.ceil(bound / math.sqrt(step) * _POINTS_PER_SD / 2)) + 1
    new = np.linspace(-bound, bound, max(points, 101))
    h = new[1] - new[0]
    simpson = np.ones(len(new))
    simpson[1:-1:2], simpson[2:-1:2] = 4.0, 2.0
    simpson *= h / 3
    sd = math.sqrt(step)
    if grid is None:
        values = scipy_stats.norm.pdf(new / sd) / sd
    else:
        assert weights is not None and density is not None
        kernel = scipy_stats.norm.pdf((new[:, None] - grid[None, :]) / sd) / sd
        values = kernel @ (weights * density)
    return new, simpson, values


def t_boundary(z: float, df: float) -> float:
    """A z-scale boundary carried to the t scale at `df` by its nominal level (Jennison
    and Turnbull 2000, 3.8)."""
    if not math.isfinite(z):
        return math.inf
    return float(scipy_stats.t.isf(scipy_stats.norm.sf(z), df))


def look_blocks(minimum: int, maximum: int) -> list[int]:
    """After how many blocks a sweep with `restarts = minimum` and `max_restarts =
    maximum` looks: every block from the minimum on."""
    if minimum < 2 or maximum < minimum:
        raise ValueError(f"a sequential design needs 2 <= restarts <= max_restarts, got "
                         f"{minimum} and {maximum}")
    return list(range(minimum, maximum + 1))


def fractions_of(blocks: Sequence[int], maximum: int) -> tuple[float, ...]:
    return tuple(n / maximum for n in blocks)


@dataclass(frozen=True)
class Look:
    """One interim look at one comparison: its statistic against its boundary."""

    look: int  # 1 for the first look
    blocks: int  # restarts per arm it rests on
    fraction: float  # blocks / max_restarts
    difference: float | None  # mean(b) - mean(a)
    statistic: float | None  # Welch's t; None: no spread to read it from
    df: float | None  # the boundary's: min(n_a, n_b) - 1 (Hsu), not Welch's
    z_boundary: float
    boundary: float | None  # on the t scale at df
    nominal_level: float  # the two-sided level the boundary holds this look to
    crossed: bool


def welch_t(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float] | None:
    """(mean(b) - mean(a), Welch's t, its df); None with < 2 means on a side or no spread."""
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = float(np.var(a, ddof=1)) / len(a), float(np.var(b, ddof=1)) / len(b)
    difference = float(np.mean(b) - np.mean(a))
    if va + vb == 0:
        return None
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return difference, difference / math.sqrt(va + vb), df


def looks(a: Sequence[float], b: Sequence[float], minimum: int, maximum: int,
          a_blocks: Sequence[int] | None = None, b_blocks: Sequence[int] | None = None,
          alpha: float = ALPHA) -> list[Look]:
    """Every look the design takes over restart means, each against its boundary: the
    look after n blocks reads the means of blocks 0..n-1 (`a_blocks`, `b_blocks`: each
    mean's block; default: its position), up to the last block either arm has. A restart
    the gate excluded leaves its arm one mean short at that look, not the looks shifted."""
    a_at = list(range(len(a))) if a_blocks is None else list(a_blocks)
    b_at = list(range(len(b))) if b_blocks is None else list(b_blocks)
    last = min(max(a_at, default=-1), max(b_at, default=-1)) + 1
    blocks = [n for n in look_blocks(minimum, maximum) if n <= last]
    # The boundaries of the whole schedule (Lan-DeMets: a look's boundary depends only on
    # the looks before it, so those taken share the schedule's).
    z = z_boundaries(fractions_of(look_blocks(minimum, maximum), maximum), alpha)
    out = []
    for i, n in enumerate(blocks):
        welch = welch_t([m for m, k in zip(a, a_at, strict=True) if k < n],
                        [m for m, k in zip(b, b_at, strict=True) if k < n])
        level = float(2 * scipy_stats.norm.sf(z[i]))
        if welch is None:
            out.append(Look(i + 1, n, n / maximum, None, None, None, z[i], None, level,
                            False))
            continue
        difference, t, _ = welch
        df = float(min(sum(k < n for k in a_at), sum(k < n for k in b_at)) - 1)
        bound = t_boundary(z[i], df)
        out.append(Look(i + 1, n, n / maximum, difference, t, df, z[i], bound, level,
                        abs(t) >= bound))
    return out


def decided(ab: Look, control: Look | None, control_required: bool) -> bool:
    """Whether an A/B is decided at this look: its statistic crossed the boundary and,
    where it has an A/A control, the control looked at after the same blocks did not
    cross its own and differs less (T11). A comparison never decided runs to the maximum
    and is judged there."""
    if not ab.crossed:
        return False
    if control is None:
        return not control_required
    if control.crossed or control.blocks != ab.blocks:
        return False
    return control.difference is None or ab.difference is None or (
        abs(ab.difference) > abs(control.difference))


def first_decision(ab: list[Look], control: list[Look] | None = None) -> Look | None:
    """The first look at which the A/B is decided (None: at none of them)."""
    by_blocks = {look.blocks: look for look in control or []}
    for look in ab:
        if decided(look, by_blocks.get(look.blocks), control is not None):
            return look
    return None
