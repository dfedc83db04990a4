"""A rate search (issue #27; `rate_search` in the sweep, docs/protocol.md: SLOs, goodput
and the frontier): restart 0 of an arm finds, at each concurrency, the highest open-loop
rate it sustains, judging each window it measures by the sweep's SLOs and saturation
signs (benchledger.sweep.slos: the same definitions the warehouse applies, slo_judge.sql and
queue_growth.sql run here with DuckDB over the window's requests file); the arm's other
restarts measure exactly the rates restart 0 chose, in its order, so every point the
search measured has a restart-level interval. What restart 0 chose and why is its search
record (`<workload>.search` in its folder); a later restart refuses to guess without it.

The judgement here only steers which rates are measured: every window is loaded, gated and
derived like any other, and the frontier (warehouse/frontier.py) judges the points again
over all restarts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchledger.raw import layout as raw
from benchledger.raw.layout import LoadPoint, RunLayout
from benchledger.sweep.slos import (
    bounds_rows,
    judge_sql,
    meets_target,
    next_rate,
    queue_growth_sql,
    saturation_reasons,
)
from benchledger.sweep.spec import ArmPlan, Sweep

log = logging.getLogger(__name__)
SLO_COLUMNS = ["window_id", "request_id", "status", "output_tokens", "t_submit_ns",
               "t_first_ns", "t_last_ns", "t_done_ns", "t_first_reasoning_ns",
               "t_last_reasoning_ns", "content_event_ns", "is_warmup"]

Measure = Callable[[LoadPoint], dict[str, Any]]  # a load point's window manifest


class SearchNotRecorded(RuntimeError):
    """A later restart of a searching arm without restart 0's finished search record."""


def judge_window(manifest: dict[str, Any], folder: Path, sweep: Sweep, plan: ArmPlan,
                 workload: str) -> dict[str, Any]:
    """Whether the window's load is sustained, with its attainment and why not."""
    import duckdb
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(folder / manifest["requests_file"], columns=SLO_COLUMNS)
    table = table.filter(pc.invert(table["is_warmup"])).drop(["is_warmup"])
    table = table.append_column("cell", pa.array([0] * len(table), pa.int64()))
    slos = sweep.slos_of(workload)
    bounds = pa.Table.from_pylist(
        [dict(zip(("cell", "slo", "metric", "max_s"), row, strict=True))
         for row in bounds_rows(slos)],
        schema=pa.schema([("cell", pa.int64()), ("slo", pa.string()),
                          ("metric", pa.string()), ("max_s", pa.float64())]))
    with duckdb.connect() as con:
        con.register("slo_requests", table)
        con.register("slo_bounds", bounds)
        met = {slo: count for _, slo, count, _ in con.execute(judge_sql()).fetchall()}
        growth = con.execute(queue_growth_sql()).fetchall()
    submitted = manifest.get("submitted") or 0
    share = {slo: (count / submitted if submitted else None) for slo, count in met.items()}
    attainment = share.get("*") if slos else None
    requested, achieved = manifest.get("requested_span_s"), manifest.get("achieved_span_s")
    lag, bound = manifest.get("arrival_lag_p99_ms"), manifest.get("max_arrival_lag_ms")
    reasons = saturation_reasons(
        sweep.slo_target,
        requested / achieved if requested is not None and achieved else None,
        growth[0][1] if growth else None, growth[0][2] if growth else None,
        manifest.get("unresolved"), lag is not None and bound is not None and lag > bound)
    meets = meets_target(sweep.slo_target, slos, attainment, share)
    if meets is False:
        reasons.append(f"SLO attainment {attainment:.0%} below the target "
                       f"{sweep.slo_target.attainment:.0%}" if attainment is not None
                       and attainment < sweep.slo_target.attainment
                       else "an SLO with a percentile was not met")
    return {"sustained": not reasons, "attainment": attainment, "why": "; ".join(reasons)
            or None}


def search_or_repeat(layout: RunLayout, sweep: Sweep, plan: ArmPlan, arm: str, k: int,
                     workload: str, measure: Measure) -> list[dict[str, Any]]:
    """Restart 0: search, recording each step; a later restart: repeat restart 0's rates.
    Returns the window manifests, in the order measured."""
    if k > 0:
        return [measure(LoadPoint.parse(step["load_point"]))
                for step in _recorded_steps(layout, arm, workload)]
    assert plan.rate_search is not None
    path = layout.search_record(arm, 0, workload)
    steps: list[dict[str, Any]] = []
    manifests = []
    for concurrency in plan.concurrency:
        history: list[tuple[float, bool]] = []
        while (rate := next_rate(plan.rate_search, history)) is not None:
            point = LoadPoint(concurrency, rate)
            manifest = measure(point)
            verdict = judge_window(manifest, path.parent, sweep, plan, workload)
            history.append((rate, verdict["sustained"]))
            steps.append({"load_point": point.label, "concurrency": concurrency,
                          "rate_rps": rate, "window_id": manifest.get("window_id"), **verdict})
            log.info("%s: %s %s", manifest.get("window_id"),
                     "sustained" if verdict["sustained"] else "not sustained",
                     verdict["why"] or "")
            manifests.append(manifest)
            raw.write_json(path, _record(workload, plan, steps, complete=False))
    raw.write_json(path, _record(workload, plan, steps, complete=True))
    return manifests


def _record(workload: str, plan: ArmPlan, steps: list[dict[str, Any]],
            complete: bool) -> dict[str, Any]:
    search = plan.rate_search
    assert search is not None
    return {"workload": workload, "search": search.model_dump(), "steps": steps,
            "complete": complete}


def _recorded_steps(layout: RunLayout, arm: str, workload: str) -> list[dict[str, Any]]:
    path = layout.search_record(arm, 0, workload)
    try:
        record = raw.read_json(path)
    except (OSError, ValueError) as exc:
        raise SearchNotRecorded(
            f"{arm}: restart 0 left no search record for workload {workload!r} ({path}: "
            f"{exc}); a later restart measures the rates restart 0 chose and cannot guess "
            "them (restart 0 failed or crashed before its search ended)") from exc
    if not record.get("complete"):
        raise SearchNotRecorded(
            f"{arm}: restart 0's search for workload {workload!r} did not finish ({path} "
            f"holds {len(record.get('steps', []))} step(s)); a later restart repeats a "
            "finished search only")
    return list(record["steps"])


def searched_points(layout: RunLayout, arm: str, workload: str) -> list[LoadPoint] | None:
    """The points restart 0's finished search measured (None: no finished record)."""
    try:
        return [LoadPoint.parse(step["load_point"])
                for step in _recorded_steps(layout, arm, workload)]
    except SearchNotRecorded:
        return None
