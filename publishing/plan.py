"""`benchledger plan`: the restarts per arm a sweep's comparisons need (issue #41, item 4;
docs/protocol.md, "Planning restarts").

It reads an earlier run of the sweep (its newest, or a pilot run named by id): for each A/B,
each arm's restart means, and from them the spread a plan rests on, split as the protocol
splits it. The sd of a restart mean (s) is what Welch's interval over restarts sees; it is
the noise within a restart (the request-level sd over the restart's requests, w / sqrt(m))
plus the instance-to-instance spread between restarts (T5): s^2 = w^2 / m + i^2. More
requests per restart shrink only the first; only more restarts shrink the second, which on
real servers dominates. The plan is the least n restarts per arm whose detectable effect
(benchledger.design.power) is at most the effect asked about, at the observed s of each arm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd

from benchledger.design.power import POWER, restarts_for
from benchledger.publishing.formatting import significant
from benchledger.warehouse.db import query_frame
from benchledger.warehouse.history import UnknownSweep


@dataclass(frozen=True)
class Spread:
    """One arm's restart means, split: s the sd of a restart mean; within the pooled
    request-level sd and m the mean requests per restart; between the instance spread
    (sqrt(max(0, s^2 - within^2 / m))). within and between are None where the entry has
    no request-level sd (a window-level metric such as throughput)."""

    mean: float
    restarts: int
    s: float | None
    within: float | None
    m: float
    between: float | None


def spread(rows: pd.DataFrame) -> Spread:
    means = rows["mean"].astype(float).to_numpy()
    n = rows["n_requests"].astype(float).to_numpy()
    s = float(np.std(means, ddof=1)) if len(means) >= 2 else None
    sds = rows["sd"].astype(float).to_numpy()
    usable = ~np.isnan(sds) & (n >= 2)
    within = (math.sqrt(float(np.sum((n[usable] - 1) * sds[usable] ** 2))
                        / float(np.sum(n[usable] - 1))) if usable.any() else None)
    m = float(np.mean(n)) if len(n) else 0.0
    between = (math.sqrt(max(0.0, s**2 - within**2 / m))
               if s is not None and within is not None and m > 0 else None)
    return Spread(float(np.mean(means)), len(means), s, within, m, between)


def plan(con: duckdb.DuckDBPyConnection, sweep_name: str, effect: float | None,
         run_id: str | None = None) -> tuple[str, pd.DataFrame]:
    """(the run read, one row per A/B): the spread of each arm and the restarts per arm
    that detect `effect` (relative to a's mean; None: each comparison's smallest_effect)."""
    latest = query_frame(con, "sweep_latest_file", sweep=sweep_name, run_id=run_id)
    if latest.empty:
        raise UnknownSweep(f"no run of sweep {sweep_name!r}"
                           + (f" with id {run_id!r}" if run_id else "") + " in the warehouse")
    run = str(latest["run_id"].iloc[0])
    rows = query_frame(con, "plan_restart_means", run_id=run)
    out = []
    for _, group in rows.groupby("comparison_id", sort=False):
        first = group.iloc[0]
        a, b = (spread(group[group["side"] == side]) for side in ("a", "b"))
        wanted = effect if effect is not None else (
            None if pd.isna(first["smallest_effect"]) else float(first["smallest_effect"]))
        planned = None
        if wanted is not None and a.s is not None and b.s is not None and a.mean:
            planned = restarts_for(wanted * abs(a.mean), a.s, b.s)
        out.append({"a": first["a"], "b": first["b"], "workload": first["workload"],
                    "metric": first["metric"], "load_point": first["load_point"],
                    "unit": first["unit"], "a_mean": a.mean, "b_mean": b.mean,
                    "a_restarts": a.restarts, "b_restarts": b.restarts,
                    "a_sd_restart_mean": a.s, "b_sd_restart_mean": b.s,
                    "a_sd_within": a.within, "b_sd_within": b.within,
                    "a_requests_per_restart": a.m, "b_requests_per_restart": b.m,
                    "a_sd_between": a.between, "b_sd_between": b.between,
                    "effect": wanted,
                    "restarts_per_arm": planned.restarts if planned else None,
                    "beyond_cap": planned is not None and planned.restarts is None})
    return run, pd.DataFrame(out)


def _sd(value: object) -> str:
    return "-" if value is None or pd.isna(value) else significant(value)


def format_plan(run: str, frame: pd.DataFrame) -> str:
    """The terminal's plan: per A/B, the spread it rests on and the restarts it needs."""
    if frame.empty:
        return f"run {run}: no A/B comparison with restart means to plan from"
    lines = [f"planned from run {run} ({int(POWER * 100)}% power, 95% confidence, Welch "
             "over restart means; docs/protocol.md, Planning restarts):"]
    for r in frame.itertuples():
        lines.append(f"  {r.a} -> {r.b}  {r.workload}  {r.metric} at {r.load_point or '-'}")
        for side in ("a", "b"):
            lines.append(
                f"      {side} {getattr(r, side)}: mean {significant(getattr(r, f'{side}_mean'))}"
                f" {r.unit} over {getattr(r, f'{side}_restarts')} restarts; sd of a restart "
                f"mean {_sd(getattr(r, f'{side}_sd_restart_mean'))} = within restarts "
                f"{_sd(getattr(r, f'{side}_sd_within'))} over "
                f"{significant(getattr(r, f'{side}_requests_per_restart'))} requests, and "
                f"between instances {_sd(getattr(r, f'{side}_sd_between'))}")
        if r.effect is None or pd.isna(r.effect):
            lines.append("      no effect to plan for: pass --effect or set the "
                         "comparison's smallest_effect")
        elif r.beyond_cap:
            lines.append(f"      to detect {100 * r.effect:.3g}%: more than 1000 restarts "
                         "per arm at this spread")
        elif r.restarts_per_arm is None or pd.isna(r.restarts_per_arm):
            lines.append("      fewer than 2 restarts on an arm: no spread to plan from")
        else:
            lines.append(f"      to detect {100 * r.effect:.3g}% "
                         f"({significant(r.effect * abs(r.a_mean))} {r.unit}): "
                         f"{int(r.restarts_per_arm)} restarts per arm")
    return "\n".join(lines)
