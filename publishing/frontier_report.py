"""The report's frontier charts (issue #27): the throughput-interactivity frontier with
restart-level error bars on both axes, and SLO attainment against load, with the frontier
points as a table. Reads the warehouse's `frontier` table; the frontier comparisons'
findings are among the report's verdicts (report_cards.py)."""

from __future__ import annotations

import pandas as pd
from markupsafe import Markup

from benchledger.publishing.report_charts import Chart, error_bars, pyplot, svg_document
from benchledger.publishing.report_markup import figure, table
from benchledger.publishing.templating import fragment


def plot_frontier(points: pd.DataFrame) -> Chart | None:
    """Aggregate output tok/s against per-user tok/s, one line per arm and workload along
    its ladder, each point with its restart-level 95% interval on both axes; the sustained
    point ringed."""
    points = points[points["per_user_tok_s"].notna() & points["throughput_tok_s"].notna()]
    if points.empty:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for (arm, workload), mine in points.groupby(["arm", "workload"], sort=False):
        x, y = mine["per_user_tok_s"], mine["throughput_tok_s"]
        ax.errorbar(x, y, xerr=error_bars(x, mine["per_user_low"], mine["per_user_high"]),
                    yerr=error_bars(y, mine["throughput_low"], mine["throughput_high"]),
                    fmt="o-", capsize=3,
                    label=f"{arm} / {workload}")
        best = mine[mine["sustained"].astype(bool)]
        ax.scatter(best["per_user_tok_s"], best["throughput_tok_s"], s=160,
                   facecolors="none", edgecolors="black")
    ax.set_xlabel("per-user decode rate (tok/s), restart-level 95% CI")
    ax.set_ylabel("aggregate output throughput (tok/s)")
    ax.legend(fontsize=7)
    return Chart("frontier", "The throughput-interactivity frontier",
                 "Throughput against per-user speed; each point one load of the arm's "
                 "ladder, both axes with the restart-level 95% interval. Ringed: the highest "
                 "load sustained under the sweep's SLOs (every point is kept, past "
                 "saturation included).", svg_document(fig))


def plot_attainment(points: pd.DataFrame) -> Chart | None:
    """SLO attainment (all submitted requests) against the load asked for."""
    points = points[points["attainment"].notna()]
    if points.empty:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for (arm, workload), mine in points.groupby(["arm", "workload"], sort=False):
        load = mine["requested_rate_rps"].fillna(mine["concurrency"])
        a = mine["attainment"]
        ax.errorbar(load, a, yerr=error_bars(a, mine["attainment_low"], mine["attainment_high"]),
                    fmt="o-", capsize=3, label=f"{arm} / {workload}")
    ax.set_xscale("log")
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("load: requested rate (rps), or concurrency without a rate")
    ax.set_ylabel("SLO attainment (all submitted)")
    ax.legend(fontsize=7)
    return Chart("slo-attainment", "SLO attainment against load",
                 "Failed and unfinished requests count as misses.", svg_document(fig))


def frontier_charts(points: pd.DataFrame) -> list[Chart]:
    """The frontier's charts; none for a run without frontier points."""
    if points.empty:
        return []
    return [c for c in (plot_frontier(points), plot_attainment(points)) if c is not None]


def frontier_parts(points: pd.DataFrame, charts: list[Chart]) -> Markup:
    """The frontier's figures, the loads each arm sustains, and its points (collapsed)."""
    if points.empty:
        return Markup()
    sustained = points[points["sustained"].astype(bool) & points["attainment"].notna()]
    return fragment(
        "report_frontier.html", figures=[figure(chart) for chart in charts],
        sustained=[(r.arm, r.workload, r.load_point, r.attainment)
                   for r in sustained.itertuples()],
        points=table(points, ["arm", "workload", "load_point", "per_user_tok_s",
                              "per_user_low", "per_user_high", "throughput_tok_s",
                              "throughput_low", "throughput_high",
                              "throughput_per_gpu_tok_s", "attainment", "goodput_tok_s",
                              "saturated", "saturation_reason", "sustained"]))
