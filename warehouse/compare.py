"""A/B comparisons with same-vs-same controls (docs/protocol.md: T5, T11).

The restart is the unit of replication: a comparison's interval is Welch's over the two
arms' restart means. A difference is a finding only when that interval excludes zero AND
the difference is larger than what an A/A control (one configuration run under two names)
shows. Every comparison gets a verdict, refuted ones included:

    improvement | regression | no finding | underpowered | not decidable

Each also says what its restarts could have detected, its within-block (paired) difference
where restarts ran in blocks, and the drift of restart means over the sweep
(warehouse/design.py); a finding smaller than a drift found is no finding (T19).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import duckdb
import pandas as pd

from benchledger import __version__
from benchledger import rules as R
from benchledger.expectations.gate import run_comparison_gate
from benchledger.stats import (
    CONFIDENCE,
    MAX_RESTARTS_TO_DECIDE,
    Difference,
    welch,
    welch_from_summary,
)
from benchledger.sweep.order import ARM_BY_ARM, minimum_restarts
from benchledger.sweep.spec import Comparison, LoadPoint, Sweep
from benchledger.warehouse.db import query_frame, recorded_sweep
from benchledger.warehouse.design import (
    design_values,
    inputs,
    sequential_values,
    significant_drift,
)
from benchledger.warehouse.equivalence import (
    NAMED,
    Equivalence,
    applies,
    equivalence,
    run_answers,
)
from benchledger.warehouse.validate import store_results

# Which entry a comparison reads for a metric: request-level where there is one.
WINDOW_LEVEL = {"throughput", "completion_fraction", "success_fraction", "energy_per_token",
                "tokens_per_joule", "goodput", "slo_attainment"}
# The numerator a comparison reads where it names none.
DEFAULT_NUMERATOR = {"throughput": "output_tokens", "goodput": "output_tokens",
                     "slo_attainment": "requests_meeting_all_slos"}
# Units of which less is better (latencies, energy per token); of every other unit, more.
LOWER_IS_BETTER = {"s", "J/token"}
# A comparison's verdict (comparisons.verdict), and the words of the frontier's findings and
# the history's changes (warehouse.frontier, warehouse.history), which import them from here.
IMPROVEMENT, REGRESSION = "improvement", "regression"
NO_FINDING, NOT_DECIDABLE = "no finding", "not decidable"
# a "no finding" whose restarts could not have detected the comparison's smallest_effect
UNDERPOWERED = "underpowered"


@dataclass(frozen=True)
class Side:
    """One arm's entry in a comparison, with its restart means."""

    entry: pd.Series | None
    restarts: pd.DataFrame  # restart_id, n_requests, mean, sd

    @property
    def means(self) -> list[float]:
        return list(self.restarts["mean"])

    @property
    def blocked(self) -> str | None:
        if self.entry is None:
            return "no entry"
        return None if self.entry["publishable"] else "blocked: " + str(self.entry["blocked_by"])


@dataclass(frozen=True)
class IntervalMeaning:
    """What an interval over restart means can say: its degrees of freedom, whether it
    cannot decide (it spans 0), and roughly how many restarts per arm would decide it."""

    df: float | None  # Welch-Satterthwaite; None: no interval (a side with < 2 restarts)
    undecided: bool  # an interval that includes 0
    restarts_to_decide: int | None  # None: decided, no spread or difference, or beyond cap
    beyond_cap: bool = False  # undecided, and not within MAX_RESTARTS_TO_DECIDE per arm


def restarts_to_decide(a: list[float], b: list[float],
                       confidence: float = CONFIDENCE) -> tuple[int | None, bool]:
    """The smallest n restarts per arm at which Welch's interval would exclude 0 if the
    observed difference of means and each arm's observed between-restart sd held: the
    least n >= 2 with t(confidence, df(n)) * sqrt((s_a^2 + s_b^2) / n) < |mean b - mean a|,
    df(n) = (n - 1) (s_a^2 + s_b^2)^2 / (s_a^4 + s_b^4) (docs/protocol.md, comparisons).
    A plug-in estimate, not a power calculation: a rerun at n decides about half the time.
    (None, True) where no n up to MAX_RESTARTS_TO_DECIDE would; (None, False) where there
    is no difference or no spread to estimate from."""
    import numpy as np
    from scipy import stats as scipy_stats

    difference = abs(float(np.mean(b)) - float(np.mean(a)))
    var_a, var_b = float(np.var(a, ddof=1)), float(np.var(b, ddof=1))
    if difference == 0 or var_a + var_b == 0:
        return None, False
    n = np.arange(2, MAX_RESTARTS_TO_DECIDE + 1, dtype=float)
    df = (n - 1) * (var_a + var_b) ** 2 / (var_a**2 + var_b**2)
    half = scipy_stats.t.ppf(0.5 + confidence / 2, df) * np.sqrt((var_a + var_b) / n)
    decides = np.flatnonzero(half < difference)
    return (int(n[decides[0]]), False) if len(decides) else (None, True)


def interval_meaning(a: list[float], b: list[float], diff: Difference | None) -> IntervalMeaning:
    """The df behind diff (Welch over restart means a and b) and, where it spans 0, the
    restarts per arm that would decide it."""
    if diff is None or diff.low is None or diff.high is None:
        return IntervalMeaning(None, False, None)
    if diff.excludes_zero:
        return IntervalMeaning(diff.df, False, None)
    if len(a) < 2 or len(b) < 2:  # a request-level interval: no spread between restarts
        return IntervalMeaning(diff.df, True, None)
    needed, beyond = restarts_to_decide(a, b)
    return IntervalMeaning(diff.df, True, needed, beyond)


def decide(diff: Difference | None, higher_is_better: bool, control: float | None,
           has_control: bool, replicated: bool, beyond_control: bool | None) -> tuple[str, str]:
    """The verdict and its reason, from the difference and the comparison rules' results:
    `replicated` is ab_restarts_replicated's, `beyond_control` ab_beyond_control's (None
    where no control difference was measured)."""
    if diff is None:
        return NOT_DECIDABLE, "no difference could be computed"
    if not replicated:
        if diff.low is not None and not diff.excludes_zero:
            return NO_FINDING, ("no difference found between single instances (request-"
                                "level interval includes 0); a finding needs >= "
                                f"{R.MIN_RESTARTS_FOR_CLAIM} restarts per arm (T5)")
        return NOT_DECIDABLE, ("one restart per arm: an instance effect cannot be told "
                               f"from the arm; run >= {R.MIN_RESTARTS_FOR_CLAIM} restarts "
                               "per arm (T5)")
    if not diff.excludes_zero:
        return NO_FINDING, "the 95% interval of the difference over restarts includes 0"
    if has_control and control is None:
        return NOT_DECIDABLE, "the A/A control was not measured (no publishable entries)"
    if beyond_control is False:
        return NO_FINDING, (f"the difference ({diff.difference:.4g}) is not larger than the "
                            f"A/A control's ({control:.4g}) (T11)")
    better = (diff.difference > 0) == higher_is_better
    return (IMPROVEMENT if better else REGRESSION), (
        "the interval over restart means excludes 0"
        + (" and the difference exceeds the A/A control's" if control is not None else ""))


def side_of(entries: pd.DataFrame, restart_means: pd.DataFrame, arm: str, workload: str,
          metric: str, numerator: str | None, point: LoadPoint) -> Side:
    level = entries["scope"] == "aggregate" if metric in WINDOW_LEVEL else (
        entries["scope"] != "aggregate")
    match = entries[(entries["arm"] == arm) & (entries["workload"] == workload)
                    & (entries["metric"] == metric) & (entries["load_point"] == point.label)
                    & (entries["statistic"] == "mean") & level]
    if metric == "slo_attainment":  # over all submitted requests, every SLO
        match = match[match["population"] == "all_submitted"]
    if numerator is not None:
        match = match[match["numerator"] == numerator]
    if match.empty:
        return Side(None, restart_means.iloc[0:0])
    entry = match.iloc[0]
    return Side(entry, restart_means[restart_means["entry_id"] == entry["entry_id"]])


def _difference(a: Side, b: Side, single_instance: bool) -> Difference | None:
    if a.restarts.empty or b.restarts.empty:
        return None
    if not single_instance:
        return welch(a.means, b.means)
    ra, rb = a.restarts.iloc[0], b.restarts.iloc[0]  # within one instance: over requests
    summary = [(r["mean"], None if pd.isna(r["sd"]) else r["sd"], int(r["n_requests"]))
               for r in (ra, rb)]
    return welch_from_summary(summary[0], summary[1])


def shared_points(comparison: Comparison, entries: pd.DataFrame) -> list[LoadPoint]:
    """The load points both arms (and the control's) have entries at (every planned point
    has them, blocked or not; a searching arm's are those it measured), lowest first,
    narrowed to the comparison's concurrency and rate where it names them."""
    arms = [comparison.a, comparison.b, *(comparison.control or [])]
    shared = set.intersection(*(
        {LoadPoint.parse(label)
         for label in set(entries.loc[entries["arm"] == arm, "load_point"].dropna())}
        for arm in arms))
    return sorted(p for p in shared
                  if comparison.concurrency in (None, p.concurrency)
                  and comparison.rate_rps in (None, p.rate_rps))


# A frontier comparison's two axes: (metric, numerator) of the comparisons made at each point.
FRONTIER_AXES = (("throughput", "output_tokens"), ("decode_rate", "output_tokens"))


def expanded(sweep: Sweep, entries: pd.DataFrame) -> list[Comparison]:
    """The sweep's comparisons, each frontier comparison as its two axes at every load point
    the arms share (warehouse/frontier.py reads them back as findings)."""
    out = []
    for comparison in sweep.comparisons:
        if comparison.metric != "frontier":
            out.append(comparison)
            continue
        out += [comparison.model_copy(update={
                    "metric": metric, "numerator": numerator,
                    "concurrency": point.concurrency, "rate_rps": point.rate_rps})
                for point in shared_points(comparison, entries)
                for metric, numerator in FRONTIER_AXES]
    return out


def point_of(comparison: Comparison, entries: pd.DataFrame) -> LoadPoint | None:
    points = shared_points(comparison, entries)
    return points[0] if points else None


def _arm_config(restarts: pd.DataFrame, arm: str) -> str | None:
    """The effective config every restart of the arm reported; None if they disagree."""
    hashes = set(restarts.loc[restarts["arm"] == arm, "effective_config_sha256"].dropna())
    return next(iter(hashes)) if len(hashes) == 1 else None


def derive_comparisons(con: duckdb.DuckDBPyConnection, run_id: str,
                       sweep: Sweep | None = None) -> int:
    """Write every comparison of the run's sweep, per workload; returns how many were new.
    `sweep`: the run's recorded sweep, when the caller has parsed it already.

    Each new A/B is first held to the comparison rules of the catalogue (their results go
    to `validations`, suite "comparisons"); its verdict follows from those results.
    """
    sweep = sweep or recorded_sweep(con, run_id)
    entries, restart_means, restarts = comparison_frames(con, run_id)
    answers = run_answers(con, run_id)
    pending = []
    for comparison in expanded(sweep, entries):
        pairs = [("ab", comparison)]
        if comparison.control:  # the A/A is recorded too: its own verdict says if it held
            control = comparison.model_copy(update={"a": comparison.control[0],
                                                    "b": comparison.control[1],
                                                    "control": None})
            pairs.insert(0, ("control", control))
        for role, pair in pairs:
            for workload in sweep.workloads:
                measured = _measure(sweep, pair, role, workload.name, entries,
                                    restart_means, restarts, run_id)
                if applies(sweep, pair):
                    _compare_answers(measured, pair, answers, workload.name)
                pending.append(measured)
    # two A/Bs held to one control (spec-off -> spec-on and spec-off -> spec-lossy, both
    # against spec-on's twin) measure that control once: its row is the same
    unique: dict[str, Measured] = {}
    for m in pending:
        unique.setdefault(m.record["comparison_id"], m)
    pending = list(unique.values())
    ids = [m.record["comparison_id"] for m in pending]
    known = {r[0] for r in con.execute("SELECT comparison_id FROM comparisons "
                                       "WHERE list_contains(?, comparison_id)", [ids]).fetchall()}
    new = [m for m in pending if m.record["comparison_id"] not in known]
    outcomes = _hold_to_rules(con, run_id, [m for m in new if m.role == "ab" and m.measured])
    for m in new:
        record = {**m.record, **m.verdict(outcomes.get(m.record["comparison_id"], {}))}
        columns = ", ".join(record)
        con.execute(f"INSERT INTO comparisons ({columns}) "
                    f"VALUES ({', '.join('?' * len(record))})", list(record.values()))
    return len(new)


def comparison_frames(con: duckdb.DuckDBPyConnection, run_id: str
                      ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """What comparisons read of a run: its current entries (each with its load point),
    their restart means, and its restarts (also read by warehouse/interim.py's looks)."""
    entries = con.execute("SELECT * FROM current_entries WHERE run_id = ?", [run_id]).df()
    restart_means = query_frame(con, "entry_restart_means_for_run", run_id=run_id)
    restarts = con.execute("SELECT restart_id, arm, effective_config_sha256, block, "
                           "started_at, restart_order FROM restarts "
                           "WHERE run_id = ?", [run_id]).df()
    entries["load_point"] = entries["load_point"].fillna(
        "c" + entries["concurrency"].astype(str))
    return entries, restart_means, restarts


def _hold_to_rules(con: duckdb.DuckDBPyConnection, run_id: str,
                   measured: list[Measured]) -> dict[str, dict[str, bool]]:
    """comparison_id -> {rule name: passed} for the catalogue's comparison rules."""
    if not measured:
        return {}
    frame = pd.DataFrame([m.gate_row() for m in measured])
    results = run_comparison_gate(frame)
    store_results(con, run_id, results)
    outcomes: dict[str, dict[str, bool]] = {}
    for result in results:
        outcomes.setdefault(result.subject, {})[result.expectation] = result.success
    return outcomes


@dataclass
class Measured:
    """A comparison's numbers before its verdict: what the rules and decide() read."""

    record: dict
    role: str
    a_name: str
    b_name: str
    a: Side | None = None
    b: Side | None = None
    diff: Difference | None = None
    control_difference: float | None = None
    has_control: bool = False
    a_config: str | None = None
    b_config: str | None = None
    early: dict | None = None  # a verdict decided before any rule (no concurrency, blocked)
    design: dict = field(default_factory=dict)  # warehouse/design.py's columns
    sequential: dict | None = None  # a sequential sweep's (design.sequential_values)
    # the arms' answers where the comparison checks them (warehouse/equivalence.py)
    equivalence: Equivalence | None = None
    control_equivalence: Equivalence | None = None

    @property
    def measured(self) -> bool:
        return self.early is None

    def sides(self) -> tuple[Side, Side]:
        """Both arms' sides: every comparison measured (no early verdict) has them."""
        assert self.a is not None and self.b is not None, "set by _measure before any rule"
        return self.a, self.b

    def gate_row(self) -> dict:
        a, b = self.sides()
        return {"comparison_id": self.record["comparison_id"], "a": self.a_name,
                "b": self.b_name, "a_config": self.a_config, "b_config": self.b_config,
                "a_restarts": len(a.restarts), "b_restarts": len(b.restarts),
                "difference": self.diff.difference if self.diff else None,
                "control_difference": self.control_difference,
                "relative_difference": self.relative_difference,
                "significant_drift": significant_drift(self.design),
                "divergent_share": (self.equivalence.divergent_share
                                    if self.equivalence else None),
                "divergence_bound": self.record.get("equivalence_bound"),
                "equivalence_found": self.equivalence_said()}

    def equivalence_said(self) -> str | None:
        """The answers in words: the A/B's divergence and its control's."""
        if self.equivalence is None:
            return None
        said = self.equivalence.said(self.b_name, self.record["workload"])
        control = self.control_equivalence
        if control is None:
            return f"{said}; no A/A control measured how much the server diverges from itself"
        return (f"{said}; the A/A control changes {control.prompts - control.identical} of "
                f"{control.prompts} (95% bound "
                f"{100 * float(self.record.get('equivalence_bound') or 0):.3g}%)")

    @property
    def relative_difference(self) -> float | None:
        """|b - a| over a's mean; None where either is missing or a's mean is 0."""
        a_mean = self.record.get("a_mean")
        if self.diff is None or not a_mean:
            return None
        return abs(self.diff.difference / a_mean)

    def verdict(self, passed: dict[str, bool]) -> dict:
        if self.early is not None:
            return self.early
        a, b = self.sides()
        meaning = interval_meaning(a.means, b.means, self.diff) if (
            len(a.restarts) >= R.MIN_RESTARTS_FOR_CLAIM
            and len(b.restarts) >= R.MIN_RESTARTS_FOR_CLAIM) else None
        values = {"difference": self.diff.difference if self.diff else None,
                  "ci95_low": self.diff.low if self.diff else None,
                  "ci95_high": self.diff.high if self.diff else None,
                  "df": self.diff.df if self.diff else None,
                  "ratio": self.diff.ratio if self.diff else None,
                  "undecided": meaning.undecided if meaning else None,
                  "restarts_to_decide": meaning.restarts_to_decide if meaning else None}
        if self.role == "control":
            same = self.a_config is not None and self.a_config == self.b_config
            return {**self.design, **_control_verdict(*self.sides(), same)}
        if not passed.get(R.AB_ARMS_DIFFER.name, True):
            return {"verdict": NOT_DECIDABLE,
                    "reason": f"refused as an A/B: arms {self.a_name!r} and {self.b_name!r} "
                              f"report identical effective configs ({str(self.a_config)[:12]}), so "
                              "this is an A/A control, not an A/B (T11)"}
        beyond = passed.get(R.AB_BEYOND_CONTROL.name)
        verdict, reason = decide(
            self.diff, self.record["higher_is_better"], self.control_difference,
            self.has_control, replicated=passed[R.AB_RESTARTS_REPLICATED.name],
            beyond_control=beyond if self.control_difference is not None else None)
        if self.sequential is not None:
            verdict, reason = sequential_verdict(verdict, reason, self.sequential)
        verdict, reason = designed_verdict(
            verdict, reason, self.design, self.diff, self.relative_difference,
            beyond_drift=passed.get(R.AB_BEYOND_DRIFT.name, True))
        if not passed.get(R.OUTPUTS_EQUIVALENT.name, True):
            verdict, reason = equivalence_verdict(verdict, reason, self.equivalence_said())
        return {**values, **self.design, "control_difference": self.control_difference,
                "verdict": verdict, "reason": reason}


def designed_verdict(verdict: str, reason: str, design: dict, diff: Difference | None,
                     relative_difference: float | None,
                     beyond_drift: bool) -> tuple[str, str]:
    """The verdict with what the design says (docs/protocol.md, "The design"): a finding
    no larger than the drift found (`beyond_drift`: ab_beyond_drift's result) is no
    finding; a "no finding" says what it could have detected, and is `underpowered` below
    the comparison's smallest effect; runs ordered arm by arm say that time and arm are
    confounded. benchmarks/design_simulation.py runs its experiments through this too."""
    if verdict in (IMPROVEMENT, REGRESSION) and not beyond_drift:
        verdict, reason = NO_FINDING, (
            f"the restart means drifted by {100 * float(design['drift']):+.3g}% over the "
            f"sweep ({_percent_interval(design)}), no less than the difference "
            f"({100 * float(relative_difference or 0):.3g}%): the drift, not the arms, may "
            "be what differs (T19)")
    detectable = design.get("detectable_relative")
    if verdict == NO_FINDING and detectable is not None and diff is not None \
            and not diff.excludes_zero:
        smallest = design.get("smallest_effect")
        if smallest is not None and detectable > smallest:
            verdict, reason = UNDERPOWERED, (
                f"{reason}; these restarts could have detected only >= "
                f"{100 * detectable:.3g}% (80% power), more than the smallest effect of "
                f"interest ({100 * smallest:.3g}%)")
        else:
            reason = f"{reason} (could have detected >= {100 * detectable:.3g}%)"
    if design.get("restart_order") == ARM_BY_ARM:
        reason += ("; restarts ran arm by arm (restart_order = \"arm_by_arm\"): a drift "
                   "during the sweep reads as a difference of the arms (T19)")
    return verdict, reason


def equivalence_verdict(verdict: str, reason: str, said: str | None) -> tuple[str, str]:
    """Answers that changed beyond the control's own divergence (outputs_equivalent): a
    faster or slower b is not the same computation, and the divergence is said whatever
    the verdict (docs/protocol.md, "Output equivalence")."""
    if verdict in (IMPROVEMENT, REGRESSION):
        return NO_FINDING, (f"the answers differ: {said}; a configuration that answers "
                            f"differently is not the same computation, so its {verdict} "
                            f"is no finding (outputs_equivalent); it was: {reason}")
    return verdict, f"{reason}; the answers differ: {said} (outputs_equivalent)"


def _compare_answers(measured: Measured, comparison: Comparison, answers: pd.DataFrame,
                     workload: str) -> None:
    """The arms' answers to the workload's prompts, and an A/B's bound from its control."""
    same = measured.equivalence = equivalence(answers, comparison.a, comparison.b, workload)
    record = measured.record
    record.update(equivalence_prompts=same.prompts, equivalence_identical=same.identical,
                  equivalence_divergent=json.dumps(same.divergent[:NAMED]))
    if measured.role != "ab":
        return
    if not comparison.control:
        record["equivalence_bound"] = 0.0  # no control: the bar is no divergence
        return
    control = measured.control_equivalence = equivalence(
        answers, comparison.control[0], comparison.control[1], workload)
    record.update(control_equivalence_prompts=control.prompts,
                  control_equivalence_identical=control.identical,
                  equivalence_bound=control.bound() if control.prompts else None)


def sequential_verdict(verdict: str, reason: str, values: dict) -> tuple[str, str]:
    """A sequential sweep's verdict (docs/protocol.md, "Sequential verdicts"): a finding
    needs a look that crossed its group-sequential boundary (with its control not crossing
    after the same blocks) as well as the fixed rules on all the restarts run; the
    repeated looks would otherwise spend more than 5%."""
    if verdict not in (IMPROVEMENT, REGRESSION, NO_FINDING):
        return verdict, reason
    blocks, statistic = values["decided_at_blocks"], values["sequential_statistic"]
    bound, looked = values["sequential_boundary"], values["sequential_looks"]
    if blocks is not None:
        seen = (f"decided after {blocks} blocks: |t| = {abs(statistic):.3g} reached the "
                f"sequential boundary {bound:.3g}")
        return verdict, (f"{reason}; {seen}" if verdict != NO_FINDING
                         else f"{reason} on all the restarts run ({seen}, then no longer)")
    last = (f"; the last, after {values['sequential_blocks']} blocks: |t| = "
            f"{abs(statistic):.3g} against {bound:.3g}"
            if statistic is not None and bound is not None else "")
    crossed = f"no look of the sequential design ({looked}) crossed its boundary{last}"
    if verdict == NO_FINDING:
        return verdict, f"{reason}; {crossed}"
    return NO_FINDING, (f"the interval over restart means excludes 0, but {crossed}: the "
                        "repeated looks of max_restarts hold a finding to the boundary")


def _measure(sweep: Sweep, comparison: Comparison, role: str, workload: str,
             entries: pd.DataFrame, restart_means: pd.DataFrame, restarts: pd.DataFrame,
             run_id: str) -> Measured:
    point = point_of(comparison, entries)
    c = point.concurrency if point else None
    numerator = comparison.numerator or DEFAULT_NUMERATOR.get(comparison.metric)
    # a rate ladder's rung is part of what is compared (a concurrency's own point keeps the
    # ids comparisons had before load points)
    rung = [point.label] if point is not None and point.rate_rps is not None else []
    labels = [role, comparison.a, comparison.b, workload, comparison.metric, numerator, c,
              *rung]
    record: dict[str, Any] = {
        "comparison_id": hashlib.sha256(json.dumps([run_id, *labels]).encode()).hexdigest()[:20],
        "run_id": run_id, "role": role, "a": comparison.a, "b": comparison.b,
        "workload": workload,
        "metric": comparison.metric, "numerator": numerator, "concurrency": c or 0,
        "load_point": point.label if point else None,
        "rate_rps": point.rate_rps if point else None,
        "control_a": comparison.control[0] if comparison.control else None,
        "control_b": comparison.control[1] if comparison.control else None,
        "harness_version": __version__, "derived_at": datetime.now(UTC),
    }
    out = Measured(record, role, comparison.a, comparison.b,
                   has_control=bool(comparison.control))
    if point is None:
        out.early = {"verdict": NOT_DECIDABLE,
                     "reason": "the arms share no load point (concurrency, rate) to compare at"}
        return out

    def side(arm: str) -> Side:
        return side_of(entries, restart_means, arm, workload, comparison.metric, numerator,
                     point)

    a, b = out.a, out.b = side(comparison.a), side(comparison.b)
    record.update(a_entry_id=_id(a), b_entry_id=_id(b), a_restarts=len(a.restarts),
                  b_restarts=len(b.restarts))
    for arm, s in ((comparison.a, a), (comparison.b, b)):
        if s.blocked:
            out.early = {"verdict": NOT_DECIDABLE,
                         "reason": f"arm {arm!r}: {s.blocked[:300]}"}
            return out
    assert a.entry is not None  # not blocked: it has its entry
    unit = a.entry["unit"]
    record.update(unit=unit, higher_is_better=unit not in LOWER_IS_BETTER,
                  a_mean=sum(a.means) / len(a.means), b_mean=sum(b.means) / len(b.means))
    out.a_config = _arm_config(restarts, comparison.a)
    out.b_config = _arm_config(restarts, comparison.b)
    replicated = len(a.restarts) >= R.MIN_RESTARTS_FOR_CLAIM and (
        len(b.restarts) >= R.MIN_RESTARTS_FOR_CLAIM)
    out.diff = _difference(a, b, not replicated)
    if role == "ab" and comparison.control:
        ca, cb = (side(arm) for arm in comparison.control)
        record.update(control_a_entry_id=_id(ca), control_b_entry_id=_id(cb))
        if not (ca.blocked or cb.blocked or ca.restarts.empty or cb.restarts.empty):
            out.control_difference = (sum(cb.means) / len(cb.means)
                                      - sum(ca.means) / len(ca.means))
    out.design = design_values(
        inputs(a.restarts, restarts), inputs(b.restarts, restarts),
        _restart_order(restarts), comparison.smallest_effect if role == "ab" else None)
    if sweep.sweep.max_restarts is not None:
        controls = [side(arm) for arm in comparison.control or []]
        out.sequential = sequential_values(
            inputs(a.restarts, restarts), inputs(b.restarts, restarts),
            tuple(inputs(c.restarts, restarts) for c in controls) or None,  # type: ignore[arg-type]
            minimum_restarts(sweep), sweep.sweep.max_restarts)
        out.design.update(out.sequential)
    return out


def _restart_order(restarts: pd.DataFrame) -> str | None:
    """How the run ordered its restarts (None: recorded before the order existed)."""
    orders = set(restarts["restart_order"].dropna())
    return next(iter(orders)) if len(orders) == 1 else None


def _percent_interval(design: dict) -> str:
    return (f"95% CI [{100 * float(design['drift_ci95_low']):+.3g}%, "
            f"{100 * float(design['drift_ci95_high']):+.3g}%]")


def _control_verdict(a: Side, b: Side, same_config: bool) -> dict:
    """An A/A: a difference here is instance-to-instance noise, never a finding."""
    diff = _difference(a, b, len(a.restarts) < 2 or len(b.restarts) < 2)
    values = {"difference": diff.difference if diff else None,
              "ci95_low": diff.low if diff else None, "ci95_high": diff.high if diff else None,
              "df": diff.df if diff else None, "ratio": diff.ratio if diff else None}
    note = "" if same_config else (" (note: the two arms report different effective "
                                   "configs, so this control may not be same-vs-same)")
    if diff is None or diff.low is None:
        return {**values, "verdict": NOT_DECIDABLE,
                "reason": "A/A control without an interval (needs >= 2 restarts per arm)" + note}
    if diff.excludes_zero:
        return {**values, "verdict": NOT_DECIDABLE,
                "reason": "the A/A control itself differs (interval excludes 0): instances "
                          "vary more than the restarts average out; add restarts" + note}
    return {**values, "verdict": NO_FINDING,
            "reason": "same-vs-same: the interval of the difference includes 0" + note}


def _id(side: Side) -> str | None:
    return None if side.entry is None else side.entry["entry_id"]
