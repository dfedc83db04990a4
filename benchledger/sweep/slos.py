"""Service-level objectives and load points (issue #27; docs/protocol.md: SLOs, goodput,
the frontier).

    [[slos]]
    name = "ttft-1s"
    metric = "ttft"            # ttft | first_token | itl | tpot | e2e_latency
    max_ms = 1000              # a request meets it when its value is at most this
    percentile = 90            # optional: the load meets it when 90% of submitted do
    workloads = ["chat"]       # optional: default every workload

    [slo_target]
    attainment = 0.9           # the share of submitted requests meeting every SLO a
                               # sustained load keeps (mean over restarts)

A request meets an SLO when it completed and its value is within the bound; a failed or
unfinished request meets none (it is in the denominator of attainment over all submitted
requests, and its label says so). Goodput (DistServe) counts the requests that met every
SLO of their workload, and their output tokens, per second of the window.

A load point is one window of each restart: a concurrency (a closed loop's users, an open
loop's cap on outstanding requests) and, for open-loop arrivals, the requested rate. An
arm's rate ladder (`rate_rps = [...]`) gives one load point per rate and concurrency; a
single rate keeps the window's older name (no rate in it).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

# A load point names its windows' files: the raw room owns it (re-exported here).
from benchledger.raw.layout import LoadPoint
from benchledger.sweep.values import Name, Strict

SloMetric = Literal["ttft", "first_token", "itl", "tpot", "e2e_latency"]
# What each SLO metric is of one request, in words (the SQL of slo_judge.sql
# computes them; docs/protocol.md repeats this table).
SLO_METRIC_MEANING: dict[str, str] = {
    "ttft": "submission to the first answer token (ttft_s)",
    "first_token": "submission to the first token of either kind, reasoning or answer "
                   "(a reasoning model's first output token)",
    "itl": "the longest gap between two consecutive streamed events after the first "
           "(the longest stall the user saw while tokens streamed)",
    "tpot": "the decode span over the tokens after the first (reasoning tokens included "
            "for a reasoning model)",
    "e2e_latency": "submission to the last byte (e2e_s)",
}
MAX_SLOS = 16


class Slo(Strict):
    """One service-level objective: a bound on one per-request latency."""

    name: Name
    metric: SloMetric
    max_ms: Annotated[float, Field(gt=0, le=86_400_000)]
    # The share (in percent) of submitted requests that must meet the bound for a load to
    # meet this SLO (e.g. 90: its p90 within max_ms, failed and unfinished requests counted
    # as misses); None: the bound only counts per request (goodput, attainment).
    percentile: Annotated[float, Field(gt=0, le=100)] | None = None
    workloads: list[Name] | None = Field(None, min_length=1)

    @property
    def max_s(self) -> float:
        return self.max_ms / 1000.0

    def applies_to(self, workload: str) -> bool:
        return self.workloads is None or workload in self.workloads


class SloTarget(Strict):
    """When a load counts as sustained: its attainment over every SLO (all submitted
    requests; the mean over restarts, whose interval the frontier keeps beside it) is at
    or above `attainment`, and each SLO with a percentile meets it."""

    attainment: Annotated[float, Field(gt=0, le=1)] = 0.9
    # Saturation (warehouse/frontier.py): a load whose submissions fell behind their
    # schedule by more than this share (every slot of `concurrency` busy), or whose wait for
    # the first token grew over the window by more than max_queue_growth (the mean of the
    # last third of its requests over the first third's: the queue grows when the server
    # takes requests slower than they come), or with unresolved requests, is saturated.
    max_rate_shortfall: Annotated[float, Field(ge=0, lt=1)] = 0.05
    max_queue_growth: Annotated[float, Field(gt=1, le=1000)] = 2.0


def load_points(concurrency: list[int], rate_rps: float | list[float] | None
                ) -> list[LoadPoint]:
    """An arm's load points, concurrency-major, rates ascending within each."""
    if not isinstance(rate_rps, list):
        return [LoadPoint(c) for c in concurrency]
    return [LoadPoint(c, float(r)) for c in concurrency for r in sorted(set(rate_rps))]


def slos_problem(slos: list[Slo], workloads: list[str]) -> str | None:
    """What is wrong with a sweep's [[slos]] (names twice, unknown workloads), or None."""
    names = [slo.name for slo in slos]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        return f"slos: duplicate name(s) {dupes}"
    for i, slo in enumerate(slos):
        unknown = sorted(set(slo.workloads or ()) - set(workloads))
        if unknown:
            return f"slos[{i}] ({slo.name}): no workload named {unknown} (workloads: " \
                   f"{sorted(workloads)})"
    return None


def judge_sql() -> str:
    """The one definition of which requests met which SLO (slo_judge.sql: the relations
    it reads and what it returns are in its header)."""
    return Path(__file__).with_name("slo_judge.sql").read_text(encoding="utf-8")


def queue_growth_sql() -> str:
    """The one definition of a window's queue growth (queue_growth.sql)."""
    return Path(__file__).with_name("queue_growth.sql").read_text(encoding="utf-8")


# --- rate search -----------------------------------------------------------------------------


class RateSearch(Strict):
    """`rate_search = {min = 1, max = 64}`: instead of a fixed ladder, restart 0 of the arm
    searches, at each concurrency, for the highest open-loop rate it sustains (every SLO of
    the workload met as [slo_target] says, not saturated): from `min`, doubling while
    sustained (up to `max`; it stops at the first load that is not, never measuring far
    past saturation), then bisecting on a log scale between the highest rate sustained and
    the lowest not, until they are within `resolution` of each other or `points` rates
    were measured. The arm's other restarts measure exactly the rates restart 0 chose, so
    every point has its restart-level interval (benchledger/restart/rate_search.py)."""

    min: Annotated[float, Field(gt=0, le=1e6)]
    max: Annotated[float, Field(gt=0, le=1e6)]
    points: Annotated[int, Field(ge=2, le=32)] = 8
    resolution: Annotated[float, Field(gt=0, le=10)] = 0.1

    @model_validator(mode="after")
    def _ordered(self) -> RateSearch:
        if self.min >= self.max:
            raise ValueError(f"rate_search: min ({self.min:g}) must be below max "
                             f"({self.max:g})")
        return self


def search_rate(value: float) -> float:
    """A rate as the search names it: three significant digits (so it names its window)."""
    return float(f"{value:.3g}")


def next_rate(search: RateSearch, history: list[tuple[float, bool]]) -> float | None:
    """The next rate to measure after `history` ((rate, sustained) in the order measured),
    or None when the search is done."""
    if len(history) >= search.points:
        return None
    if not history:
        return search_rate(search.min)
    sustained = [rate for rate, ok in history if ok]
    if not sustained:
        return None  # the lowest rate is already not sustained
    low = max(sustained)
    above = [rate for rate, ok in history if not ok and rate > low]
    if not above:  # nothing failed above the best: keep doubling towards max
        step = search_rate(min(low * 2, search.max))
        return None if step <= low else step
    high = min(above)
    middle = search_rate(math.sqrt(low * high))
    if high / low <= 1 + search.resolution or middle in (low, high):
        return None
    return middle


def bounds_rows(slos: list[Slo], cell: int = 0) -> list[tuple[int, str, str, float]]:
    """The slo_bounds rows (cell, slo, metric, max_s) of one cell's SLOs."""
    return [(cell, slo.name, slo.metric, slo.max_s) for slo in slos]


# A first-token wait that grew by less than this over a window is jitter, not a queue.
QUEUE_GROWTH_MIN_S = 0.05


def saturation_reasons(target: SloTarget, schedule_kept: float | None,
                       queue_growth: float | None, queue_growth_s: float | None,
                       unresolved: float | None, arrivals_late: bool) -> list[str]:
    """Why a load is saturated (empty: it is not): the one judgement of the frontier
    (warehouse/frontier.py) and of a searching restart (benchledger/restart/rate_search.py)."""
    reasons = []
    if schedule_kept is not None and schedule_kept < 1 - target.max_rate_shortfall:
        reasons.append(f"submissions kept {schedule_kept:.0%} of their schedule's rate")
    if queue_growth is not None and queue_growth > target.max_queue_growth \
            and (queue_growth_s or 0.0) > QUEUE_GROWTH_MIN_S:
        reasons.append(f"the wait for the first token grew {queue_growth:.3g}x over the "
                       f"window (bound {target.max_queue_growth:g}x)")
    if unresolved:
        reasons.append("requests stayed unresolved at the drain deadline")
    if arrivals_late:
        reasons.append("arrivals fell behind their schedule (arrival lag p99 beyond "
                       "max_arrival_lag_ms)")
    return reasons


def meets_target(target: SloTarget, slos: list[Slo], attainment: float | None,
                 per_slo: dict[str, float | None]) -> bool | None:
    """Whether a load meets the SLO target: attainment over every SLO (all submitted
    requests) at or above target.attainment, and each SLO with a percentile met by that
    share of them (per_slo: each SLO's attainment). None: no SLO applies."""
    if not slos:
        return None
    if attainment is None or attainment < target.attainment:
        return False
    return all(per_slo.get(slo.name) is not None
               and per_slo[slo.name] >= slo.percentile / 100  # type: ignore[operator]
               for slo in slos if slo.percentile is not None)
