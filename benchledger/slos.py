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

from typing import Annotated, Literal

from pydantic import Field

# A load point names its windows' files: the raw room owns it (re-exported here).
from benchledger.raw import LoadPoint
from benchledger.sweep_types import Name, Strict

SloMetric = Literal["ttft", "first_token", "itl", "tpot", "e2e_latency"]
# What each SLO metric is of one request, in words (the SQL of queries/derive_slo_sums.sql
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
