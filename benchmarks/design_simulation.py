"""Issue #41, item 6: the comparison's decision rules proven by simulation, not assumed.

Thousands of synthetic A/A and A/B experiments go through the code that decides a real
run's verdict: Welch's interval (benchledger.stats.welch), the verdict (warehouse.compare
decide and designed_verdict), the design columns (warehouse.design.design_values: the
detectable effect, the paired analysis, the drift) and the comparison rules of the
catalogue, run by Great Expectations as derive runs them (one suite run per scenario over
all its experiments). Each experiment draws every restart's mean as the arm's true mean
times (1 + an instance effect ~ N(0, cv)) times the drift at the moment it ran; restarts run
in the sweep's order (benchledger.sweep.order: blocked, a Williams design, or arm by arm),
one unit of time each.

What it reports, per scenario: the false-finding rate of A/A experiments (a verdict
improvement or regression between two arms of one configuration) with its 95%
Clopper-Pearson interval; for A/B experiments at the effect a plan was made for
(benchledger.design.power.restarts_for), the power (findings in the right direction); and
the restarts per arm each design spends on a decided verdict, against a fixed 15.

    .venv/bin/python benchmarks/design_simulation.py --experiments 10000 --json out.json

tests/unit/design/test_design_simulation.py runs the same code on fewer experiments.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchledger import rules as R  # noqa: E402
from benchledger.design.power import restarts_for  # noqa: E402
from benchledger.design.sequential import first_decision, looks  # noqa: E402
from benchledger.expectations.gate import run_comparison_gate  # noqa: E402
from benchledger.stats import welch  # noqa: E402
from benchledger.sweep.order import ARM_BY_ARM, BLOCKED, williams_rows  # noqa: E402
from benchledger.warehouse.compare import (  # noqa: E402
    IMPROVEMENT,
    REGRESSION,
    decide,
    designed_verdict,
)
from benchledger.warehouse.design import (  # noqa: E402
    DesignInputs,
    design_values,
    significant_drift,
)

FINDINGS = (IMPROVEMENT, REGRESSION)
# The seeds' run-to-run spread of a restart's mean: 12-19% (sd) with speculation, 1-3%
# without (docs/protocol.md, T4 and T5).
CV_SPECULATIVE, CV_PLAIN = 0.15, 0.02

Drift = Callable[[np.ndarray], np.ndarray]  # the fraction of the sweep elapsed -> factor


def no_drift(t: np.ndarray) -> np.ndarray:
    return np.ones_like(t)


def step_drift(size: float) -> Drift:
    """A machine that gets `size` slower (0.25: a quarter) halfway through the restarts."""
    return lambda t: np.where(t >= 0.5, 1 - size, 1.0)


def linear_drift(size: float) -> Drift:
    return lambda t: 1 - size * t


@dataclass(frozen=True)
class Scenario:
    name: str
    restarts: int  # per arm
    cv: float
    effect: float  # b's true mean over a's, minus 1 (0: an A/A)
    order: str
    drift: str  # described
    drift_fn: Drift


def _order(n: int, order: str, rng: np.random.Generator) -> list[tuple[str, int, int]]:
    """(arm, k, block) of 2 arms x n restarts in the order they run: blocked (a Williams
    design, the letters drawn) or arm by arm (a's first, as a file would list them)."""
    if order == ARM_BY_ARM:
        return [(arm, k, k) for arm in ("a", "b") for k in range(n)]
    letters = ["a", "b"] if rng.random() < 0.5 else ["b", "a"]
    rows = williams_rows(2)
    return [(letters[i], k, k) for k in range(n) for i in rows[k % 2]]


def experiment(s: Scenario, rng: np.random.Generator) -> dict:
    """One experiment: the restart means and everything the verdict reads."""
    slots = _order(s.restarts, s.order, rng)
    t = np.arange(len(slots), dtype=float)
    factor = s.drift_fn(t / max(len(slots) - 1, 1))
    truth = {"a": 100.0, "b": 100.0 * (1 + s.effect)}
    noise = rng.normal(0.0, s.cv, len(slots))
    sides: dict[str, DesignInputs] = {}
    for arm in ("a", "b"):
        idx = [i for i, slot in enumerate(slots) if slot[0] == arm]
        sides[arm] = DesignInputs(
            [float(truth[arm] * (1 + noise[i]) * factor[i]) for i in idx],
            [slots[i][2] for i in idx], [float(t[i]) for i in idx])
    a, b = sides["a"], sides["b"]
    diff = welch(a.means, b.means)
    design = design_values(a, b, s.order, None)
    verdict, reason = decide(diff, True, None, False, replicated=True, beyond_control=None)
    a_mean = float(np.mean(a.means))
    relative = abs(diff.difference / a_mean) if a_mean else None
    return {"diff": diff, "design": design, "verdict": verdict, "reason": reason,
            "relative_difference": relative}


def run_scenario(s: Scenario, experiments: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    done = [experiment(s, rng) for _ in range(experiments)]
    # the comparison rules, as derive runs them: one GX suite over every experiment
    frame = pd.DataFrame([{
        "comparison_id": f"x{i}", "a": "a", "b": "b", "a_config": "config-a",
        "b_config": "config-b", "a_restarts": s.restarts, "b_restarts": s.restarts,
        "difference": e["diff"].difference, "control_difference": None,
        "relative_difference": e["relative_difference"],
        "significant_drift": significant_drift(e["design"])} for i, e in enumerate(done)])
    passed: dict[str, dict[str, bool]] = {}
    for result in run_comparison_gate(frame):
        passed.setdefault(result.subject, {})[result.expectation] = result.success
    verdicts = []
    for i, e in enumerate(done):
        verdict, _ = designed_verdict(
            e["verdict"], e["reason"], e["design"], e["diff"], e["relative_difference"],
            beyond_drift=passed.get(f"x{i}", {}).get(R.AB_BEYOND_DRIFT.name, True))
        verdicts.append(verdict)
    verdicts_ = np.array(verdicts)
    found = int(np.isin(verdicts_, FINDINGS).sum())
    right = int((verdicts_ == (IMPROVEMENT if s.effect > 0 else REGRESSION)).sum()) \
        if s.effect else 0
    rate = scipy_stats.binomtest(found if not s.effect else right, experiments)
    ci = rate.proportion_ci(0.95, method="exact")
    detectable = [e["design"]["detectable_relative"] for e in done
                  if e["design"]["detectable_relative"] is not None]
    out = {"scenario": s.name, "restarts_per_arm": s.restarts, "cv": s.cv,
           "effect": s.effect, "order": s.order, "drift": s.drift,
           "experiments": experiments,
           "false_finding_rate" if not s.effect else "power": rate.statistic,
           "ci95": [ci.low, ci.high],
           "median_detectable_relative": float(np.median(detectable)) if detectable else None,
           # restarts (both arms) spent per verdict that found the true difference
           "restarts_per_decided_verdict": (2 * s.restarts / rate.statistic
                                            if s.effect and rate.statistic else None),
           "seconds": round(time.perf_counter() - started, 1)}
    return out


def scenarios() -> list[Scenario]:
    out = []
    for cv, label in ((CV_PLAIN, "plain"), (CV_SPECULATIVE, "speculative")):
        for n in (2, 3, 5, 15):
            out.append(Scenario(f"A/A {label} n={n}", n, cv, 0.0, BLOCKED, "none", no_drift))
    for order in (BLOCKED, ARM_BY_ARM):
        for n in (2, 5):
            out.append(Scenario(f"A/A plain, 25% slower halfway, {order} n={n}", n, CV_PLAIN,
                                0.0, order, "step -25% at half", step_drift(0.25)))
        out.append(Scenario(f"A/A plain, 10% linear slowdown, {order} n=5", 5, CV_PLAIN, 0.0,
                            order, "linear -10%", linear_drift(0.10)))
    # A/B at the effect a plan was made for: the plan's n, from the true spread
    for cv, effect, label in ((CV_PLAIN, 0.03, "plain 3%"), (CV_SPECULATIVE, 0.24,
                                                              "speculative 24%")):
        # each arm's true sd of a restart mean (the spread is relative: b's is larger)
        planned = restarts_for(effect * 100.0, 100.0 * cv, 100.0 * (1 + effect) * cv).restarts
        assert planned is not None
        out.append(Scenario(f"A/B {label}, planned n={planned}", planned, cv, effect,
                            BLOCKED, "none", no_drift))
        out.append(Scenario(f"A/B {label}, fixed n=15", 15, cv, effect, BLOCKED, "none",
                            no_drift))
    return out


# --- sequential designs (item 5): restarts = minimum, max_restarts = maximum ---------------


@dataclass(frozen=True)
class SequentialScenario:
    name: str
    minimum: int  # restarts
    maximum: int  # max_restarts
    cv: float
    effect: float  # b's true mean over a's, minus 1 (0: an A/A)
    drift: str
    drift_fn: Drift
    control: bool = False  # an A/A twin of a beside the A/B, looked at after the same blocks


def sequential_experiment(s: SequentialScenario, rng: np.random.Generator
                          ) -> tuple[bool, bool, int]:
    """One sequential experiment: (a finding, in the true direction, restarts per arm
    spent). Every block holds one restart of each arm in a Williams order (the A/A twin as
    a third arm where the scenario has a control); the drift is a function of the time
    each restart would run in the full schedule; the looks and the decision are
    benchledger.design.sequential's, which a sweep's interim looks run."""
    arms = ["a", "b", "a2"] if s.control else ["a", "b"]
    letters = list(rng.permutation(len(arms)))
    rows = williams_rows(len(arms))
    slots = [(arms[letters[i]], k) for k in range(s.maximum) for i in rows[k % len(rows)]]
    factor = s.drift_fn(np.arange(len(slots)) / max(len(slots) - 1, 1))
    noise = rng.normal(0.0, s.cv, len(slots))
    truth = {"a": 100.0, "b": 100.0 * (1 + s.effect), "a2": 100.0}
    means: dict[str, list[float]] = {arm: [] for arm in arms}
    for i, (arm, _) in enumerate(slots):
        means[arm].append(float(truth[arm] * (1 + noise[i]) * factor[i]))
    ab = looks(means["a"], means["b"], s.minimum, s.maximum)
    control = looks(means["a"], means["a2"], s.minimum, s.maximum) if s.control else None
    decided = first_decision(ab, control)
    if decided is None:
        return False, False, s.maximum
    right = (decided.difference or 0) > 0 if s.effect > 0 else False
    return True, right, decided.blocks


def run_sequential(s: SequentialScenario, experiments: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    done = np.array([sequential_experiment(s, rng) for _ in range(experiments)])
    found, right, spent = done[:, 0], done[:, 1], done[:, 2]
    hits = int(right.sum()) if s.effect else int(found.sum())
    ci = scipy_stats.binomtest(hits, experiments).proportion_ci(0.95, method="exact")
    rate = hits / experiments
    arms = 3 if s.control else 2
    return {"scenario": s.name, "design": "sequential", "restarts": s.minimum,
            "max_restarts": s.maximum, "cv": s.cv, "effect": s.effect, "drift": s.drift,
            "control": s.control, "experiments": experiments,
            "false_finding_rate" if not s.effect else "power": rate,
            "ci95": [ci.low, ci.high],
            "mean_restarts_per_arm": float(spent.mean()),
            "stopped_early": float((spent < s.maximum).mean()),
            # restarts (every arm) spent per verdict that found the true difference
            "restarts_per_decided_verdict": (arms * float(spent.mean()) / rate
                                             if s.effect and rate else None),
            "seconds": round(time.perf_counter() - started, 1)}


def sequential_scenarios() -> list[SequentialScenario]:
    out = []
    for cv, label in ((CV_PLAIN, "plain"), (CV_SPECULATIVE, "speculative")):
        for maximum in (10, 15):
            out.append(SequentialScenario(f"sequential A/A {label} 2..{maximum}", 2, maximum,
                                          cv, 0.0, "none", no_drift))
    out.append(SequentialScenario("sequential A/A plain, 25% slower halfway, 2..10", 2, 10,
                                  CV_PLAIN, 0.0, "step -25% at half", step_drift(0.25)))
    for cv, effect, label in ((CV_PLAIN, 0.03, "plain 3%"),
                              (CV_SPECULATIVE, 0.24, "speculative 24%"),
                              (CV_SPECULATIVE, 1.4, "speculative 2.4x")):
        out.append(SequentialScenario(f"sequential A/B {label}, 2..15", 2, 15, cv, effect,
                                      "none", no_drift))
    out.append(SequentialScenario("sequential A/B speculative 24% with A/A control, 2..15", 2,
                                  15, CV_SPECULATIVE, 0.24, "none", no_drift, control=True))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--only", default=None, help="scenarios whose name contains this")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)
    results = []
    for i, s in enumerate(scenarios()):
        if args.only and args.only not in s.name:
            continue
        result = run_scenario(s, args.experiments, args.seed + i)
        results.append(result)
        print(json.dumps(result), flush=True)
    for i, q in enumerate(sequential_scenarios()):
        if args.only and args.only not in q.name:
            continue
        result = run_sequential(q, args.experiments, args.seed + 100 + i)
        results.append(result)
        print(json.dumps(result), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"results": results,
                                         "scenarios": [asdict(s) | {"drift_fn": None}
                                                       for s in [*scenarios(),
                                                                 *sequential_scenarios()]]},
                                        indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
