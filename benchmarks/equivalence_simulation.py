"""Issue #42: the rule `outputs_equivalent` proven by simulation before it decides anything.

Thousands of synthetic comparisons go through the code that judges a real run's answers:
the bound (warehouse.equivalence.Equivalence.bound: the upper end of the exact 95% interval
of the A/A control's divergent share; no control: 0) and the rule itself, run by Great
Expectations over one frame per scenario as derive runs it. Each experiment draws, for n
prompts, how many answers the control's twin changes (Binomial(n, p): a server that is not
deterministic across batch shapes changes a prompt's greedy answer with probability p)
and how many the candidate changes (the same nondeterminism, plus a lossy share q of its
own: Binomial(n, 1 - (1 - p)(1 - q))).

What it reports, per scenario: the share of experiments the rule blocks, with its 95%
Clopper-Pearson interval: for q = 0 the false-block rate (a lossless candidate held back),
for q > 0 the power (a lossy one caught).

    .venv/bin/python benchmarks/equivalence_simulation.py --experiments 10000 --json out.json

tests/unit/test_benchmarks.py runs it on fewer experiments.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchledger import rules as R  # noqa: E402
from benchledger.expectations.gate import run_comparison_gate  # noqa: E402
from benchledger.warehouse.equivalence import Equivalence  # noqa: E402


@dataclass(frozen=True)
class Scenario:
    name: str
    prompts: int
    nondeterminism: float  # p: a prompt's answer changes between two instances
    lossy: float  # q: the candidate's own changed share
    control: bool = True


SCENARIOS = (
    *(Scenario(f"lossless n={n} p={p:g}", n, p, 0.0)
      for n in (16, 40, 100) for p in (0.0, 0.02, 0.05, 0.1)),
    *(Scenario(f"lossy n={n} q={q:g}", n, 0.0, q) for n in (16, 40, 100)
      for q in (0.05, 0.1, 0.2)),
    *(Scenario(f"lossy n={n} p=0.05 q={q:g}", n, 0.05, q) for n in (40, 100)
      for q in (0.1, 0.2)),
    *(Scenario(f"no control n=40 p={p:g}", 40, p, 0.0, control=False) for p in (0.0, 0.02)),
)


@cache
def _bound(prompts: int, changed: int) -> float:
    return Equivalence(prompts, prompts - changed, []).bound()


def run_scenario(s: Scenario, experiments: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    candidate = rng.binomial(s.prompts, 1 - (1 - s.nondeterminism) * (1 - s.lossy),
                             experiments)
    twin = rng.binomial(s.prompts, s.nondeterminism, experiments)
    frame = pd.DataFrame({
        "comparison_id": [f"x{i}" for i in range(experiments)], "a": "a", "b": "b",
        "a_config": "config-a", "b_config": "config-b", "a_restarts": 3, "b_restarts": 3,
        "difference": 1.0, "control_difference": None, "relative_difference": 0.5,
        "significant_drift": None,
        "divergent_share": candidate / s.prompts,
        "divergence_bound": [_bound(s.prompts, int(k)) if s.control else 0.0 for k in twin],
        "equivalence_found": ""})
    blocked = sum(1 for result in run_comparison_gate(frame)
                  if result.expectation == R.OUTPUTS_EQUIVALENT.name and not result.success)
    rate = scipy_stats.binomtest(blocked, experiments)
    ci = rate.proportion_ci(0.95, method="exact")
    return {**asdict(s), "experiments": experiments,
            "false_block_rate" if s.lossy == 0 else "power": rate.statistic,
            "ci95": [ci.low, ci.high], "seconds": time.perf_counter() - started}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--only", help="run only scenarios whose name contains this")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    results = []
    for i, s in enumerate(SCENARIOS):
        if args.only and args.only not in s.name:
            continue
        out = run_scenario(s, args.experiments, args.seed + i)
        results.append(out)
        key = "false_block_rate" if s.lossy == 0 else "power"
        print(f"{s.name:<28} {key:<16} {100 * out[key]:6.2f}%  "
              f"[{100 * out['ci95'][0]:.2f}, {100 * out['ci95'][1]:.2f}]", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
