"""The report's frontier section (issue #27): the throughput-interactivity frontier with
restart-level error bars on both axes, SLO attainment against load, and the frontier
comparisons' findings. Reads the warehouse's `frontier` and `frontier_findings` tables."""

from __future__ import annotations

import html
from collections.abc import Callable

import pandas as pd


def plot_frontier(points: pd.DataFrame, svg: Callable, pyplot: Callable) -> str | None:
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
        xerr = [(x - mine["per_user_low"]).fillna(0).clip(lower=0),
                (mine["per_user_high"] - x).fillna(0).clip(lower=0)]
        yerr = [(y - mine["throughput_low"]).fillna(0).clip(lower=0),
                (mine["throughput_high"] - y).fillna(0).clip(lower=0)]
        ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="o-", capsize=3,
                    label=f"{arm} / {workload}")
        best = mine[mine["sustained"].astype(bool)]
        ax.scatter(best["per_user_tok_s"], best["throughput_tok_s"], s=160,
                   facecolors="none", edgecolors="black")
    ax.set_xlabel("per-user decode rate (tok/s), restart-level 95% CI")
    ax.set_ylabel("aggregate output throughput (tok/s)")
    ax.legend(fontsize=7)
    return svg(fig)


def plot_attainment(points: pd.DataFrame, svg: Callable, pyplot: Callable) -> str | None:
    """SLO attainment (all submitted requests) against the load asked for."""
    points = points[points["attainment"].notna()]
    if points.empty:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for (arm, workload), mine in points.groupby(["arm", "workload"], sort=False):
        load = mine["requested_rate_rps"].fillna(mine["concurrency"])
        a = mine["attainment"]
        err = [(a - mine["attainment_low"]).fillna(0).clip(lower=0),
               (mine["attainment_high"] - a).fillna(0).clip(lower=0)]
        ax.errorbar(load, a, yerr=err, fmt="o-", capsize=3, label=f"{arm} / {workload}")
    ax.set_xscale("log")
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("load: requested rate (rps), or concurrency without a rate")
    ax.set_ylabel("SLO attainment (all submitted)")
    ax.legend(fontsize=7)
    return svg(fig)


def frontier_section(points: pd.DataFrame, findings: pd.DataFrame, svg: Callable,
                     pyplot: Callable, figure: Callable, table: Callable) -> list[str]:
    """The section's HTML parts; none for a run without frontier points."""
    if points.empty:
        return []
    sustained = points[points["sustained"].astype(bool)]
    lines = "".join(
        f"<li>{html.escape(r.arm)} / {html.escape(r.workload)}: sustains "
        f"{html.escape(r.load_point)} (attainment {r.attainment:.0%})</li>"
        for r in sustained.itertuples() if pd.notna(r.attainment))
    return [
        "<h2>The throughput-interactivity frontier</h2>",
        "<p class='note'>Each point is one load of the arm's ladder; both axes carry the "
        "restart-level 95% interval. Ringed: the highest load sustained under the sweep's "
        "SLOs (every point is kept, past saturation included).</p>",
        f"<ul>{lines}</ul>" if lines else "",
        figure(plot_frontier(points, svg, pyplot), "Throughput against per-user speed."),
        figure(plot_attainment(points, svg, pyplot), "SLO attainment against load: "
               "failed and unfinished requests count as misses."),
        table(points, ["arm", "workload", "load_point", "per_user_tok_s", "per_user_low",
                       "per_user_high", "throughput_tok_s", "throughput_low",
                       "throughput_high", "throughput_per_gpu_tok_s", "attainment",
                       "attainment_low", "attainment_high", "goodput_tok_s",
                       "meets_target", "saturated", "saturation_reason", "sustained"]),
        *([] if findings.empty else [
            "<h3>Frontier comparisons</h3>",
            table(findings, ["role", "a", "b", "workload", "load_point", "finding",
                             "throughput_difference", "throughput_ci95_low",
                             "throughput_ci95_high", "per_user_difference",
                             "per_user_ci95_low", "per_user_ci95_high", "reason"])]),
    ]
