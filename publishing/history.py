"""The history of a recurring sweep, for people (issue #28): the terminal table of
`benchledger history`, its chart, and the report's history section. What a change is and
when a line breaks is decided once, in warehouse/history.py; this module only shows it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
import pandas as pd
from markupsafe import Markup

from benchledger.publishing.formatting import person_frame, text_interval, text_number
from benchledger.publishing.report_charts import (
    Chart,
    error_bars,
    inline_svg,
    pyplot,
    svg_document,
)
from benchledger.publishing.report_markup import figure, table
from benchledger.publishing.templating import fragment
from benchledger.sweep.spec import parse_recorded
from benchledger.warehouse.db import query_frame
from benchledger.warehouse.history import (
    CONFIG_CHANGED,
    FLAGGED,
    LINE,
    REGRESSION,
    UnknownSweep,
    sweep_history,
)

__all__ = ["UnknownSweep", "format_history", "history", "history_chart",
           "history_chart_svg", "history_section"]

# The report and the UI draw at most this many panels (one per quantity and load point);
# the terminal and the warehouse have every line.
MAX_PANELS = 9


def sweep_min_change(con: duckdb.DuckDBPyConnection, sweep_name: str,
                     run_id: str | None = None) -> float:
    """The sweep's smallest change of interest (`[sweep] regression_min_change`) as run
    `run_id` recorded it (None: the sweep's newest run), so a run's report flags what its
    gate flagged and the terminal what the next gate would; 0 for a sweep with no recorded
    file (an import)."""
    newest = query_frame(con, "sweep_latest_file", sweep=sweep_name, run_id=run_id)
    if newest.empty:
        return 0.0
    row = newest.iloc[0]
    recorded = parse_recorded(row["sweep_toml"], row["sweep_sha256"],
                              f"run {row['run_id']}'s sweep file")
    return recorded.sweep.regression_min_change


def history(con: duckdb.DuckDBPyConnection, sweep_name: str,
            metrics: Sequence[str] | None = None,
            min_change: float | None = None) -> pd.DataFrame:
    """Every headline entry of every run of the sweep, with its verdict
    (warehouse.history.sweep_history; `min_change` None: the sweep's own); `value`, `low`,
    `high` are the restart-level mean and 95% interval a chart draws."""
    if min_change is None:
        min_change = sweep_min_change(con, sweep_name)
    frame = sweep_history(con, sweep_name, metrics or (), min_change)
    return frame.assign(value=frame["restart_mean"], low=frame["restart_ci95_low"],
                        high=frame["restart_ci95_high"],
                        kind=frame["scheduled_for"].notna().map(
                            {True: "scheduled", False: "manual"}))


def _line_title(row: Any) -> str:
    numerator = f" {row.numerator}" if row.numerator else ""
    return (f"{row.arm} / {row.workload}: {row.metric} {row.statistic} {row.scope}"
            f"{numerator} at {row.load_point}")


def format_history(frame: pd.DataFrame) -> str:
    """One block per line, one row per run: value with its restart-level interval, the
    change against the previous run and why; a configuration change named where the line
    breaks."""
    if frame.empty:
        return "(no headline entries in this sweep's runs)"
    out = []
    for _, line in frame.groupby(LINE, sort=False):
        first = line.iloc[0]
        out.append(_line_title(first) + f" ({first.unit})")
        for row in line.itertuples():
            if row.change == CONFIG_CHANGED:
                out.append(f"  -- line broken: {row.config_change}")
            spread = text_interval(row.restart_ci95_low, row.restart_ci95_high)
            value = f"{text_number(row.restart_mean)} {spread}" if row.publishable else "blocked"
            change = text_interval(row.ci95_low, row.ci95_high)
            diff = ("" if pd.isna(row.difference)
                    else f" diff {text_number(row.difference)} {change}")
            control = ("" if pd.isna(row.control_difference)
                       else f" A/A {text_number(row.control_difference)}")
            out.append(f"  {row.run_id:<44} {row.kind:<9} {value:<26} n={row.n_restarts} "
                       f"{row.change}{diff}{control}")
        out.append("")
    flagged = frame[frame["change"].isin(FLAGGED)]
    out.append(f"{len(flagged)} change(s) beyond the A/A control "
               f"({(flagged['change'] == REGRESSION).sum()} regression(s)) over "
               f"{frame['run_id'].nunique()} run(s)")
    return "\n".join(out)


HISTORY_TITLE = "History of this sweep"
HISTORY_CAPTION = ("Headline entries across the sweep's runs (restart-level means with their "
                   "95% intervals): ringed points changed beyond the A/A control (red: "
                   "regression); a dashed line is a new configuration, never joined to the "
                   "old one.")


def history_chart(frame: pd.DataFrame) -> Chart | None:
    """One panel per quantity and load point (at most MAX_PANELS), one line per arm and
    configuration segment (a configuration change starts a new line, never joined to the
    old one), restart-level 95% error bars, flagged changes ringed (red: regression).
    None with fewer than two runs to draw."""
    shown = frame[frame["publishable"].astype(bool) & frame["value"].notna()]
    shown = person_frame(shown, ["value", "low", "high"])  # a latency's panel in ms
    if shown.empty or shown["run_id"].nunique() < 2:
        return None
    panels = list(shown.groupby(["workload", "metric", "statistic", "scope", "numerator",
                                 "load_point"], sort=False))[:MAX_PANELS]
    order = {run: i for i, run in enumerate(dict.fromkeys(frame["run_id"]))}
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 2.8 * rows),
                             squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[len(panels):]:
        ax.set_visible(False)
    for ax, ((workload, metric, statistic, _, _, point), panel) in zip(flat, panels,
                                                                        strict=False):
        for (arm, segment), part in panel.groupby(["arm", "segment"], sort=False):
            x = part["run_id"].map(order)
            label = arm if segment == 0 else f"{arm} (config {segment + 1})"
            ax.errorbar(x, part["value"],
                        yerr=error_bars(part["value"], part["low"], part["high"]),
                        fmt="o-" if segment == 0 else "s--",
                        capsize=3, label=label)
            flagged = part[part["change"].isin(FLAGGED)]
            ax.scatter(flagged["run_id"].map(order), flagged["value"], s=140,
                       facecolors="none",
                       edgecolors=["tab:red" if c == REGRESSION else "tab:green"
                                   for c in flagged["change"]])
        # From 0, as people read a bar: an axis cut just below the values magnifies a
        # 3% change into half the panel. Only where nothing drawn goes below 0; a panel
        # that does says so in its title.
        from_zero = bool((panel[["value", "low"]].min(skipna=True).fillna(0) >= 0).all())
        if from_zero:
            ax.set_ylim(bottom=0)
        ax.set_title(f"{workload}: {metric} {statistic} at {point}"
                     + ("" if from_zero else " (axis not from 0)"), fontsize=8)
        ax.set_xlabel("run (oldest first)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # runs are counted
        ax.set_ylabel(panel["unit"].iloc[0])
        ax.legend(fontsize=6)
    fig.tight_layout()  # a row's titles clear the axis labels of the row above
    return Chart("history", HISTORY_TITLE, HISTORY_CAPTION, svg_document(fig))


def history_chart_svg(frame: pd.DataFrame) -> Markup | None:
    """The history chart as an inline <svg> element (the UI page's), or None."""
    chart = history_chart(frame)
    return None if chart is None else inline_svg(chart.svg)


def history_section(con: duckdb.DuckDBPyConnection, run_id: str
                    ) -> tuple[Markup, Chart | None]:
    """The report's history section and its chart: this run's sweep across its runs up
    to this one; nothing for a run without a sweep's reruns."""
    row = con.execute("SELECT sweep_name, started_at FROM runs WHERE run_id = ?",
                      [run_id]).fetchone()
    if row is None:
        return Markup(), None
    try:
        frame = history(con, row[0], min_change=sweep_min_change(con, row[0], run_id))
    except UnknownSweep:  # an import (another tool's file, a report's rows): no reruns
        return Markup(), None
    if not frame.empty:
        frame = frame[frame["started_at"] <= row[1]]  # what came before this run
    runs = frame["run_id"].nunique()
    if runs < 2:
        return fragment("report_history.html", title=HISTORY_TITLE, runs=runs), None
    mine = frame[frame["run_id"] == run_id]
    flagged = mine[mine["change"].isin(FLAGGED)]
    summary = (f"{len(flagged)} headline entr{'y' if len(flagged) == 1 else 'ies'} of this "
               "run changed beyond the A/A control since the sweep's previous run."
               if mine["has_control"].any() else
               "This sweep has no A/A control: no change can be flagged "
               "(no control: not decidable).")
    chart = history_chart(frame)
    # in the unit a person reads (a latency in ms), named in its own column
    shown = person_frame(mine, ["previous_restart_mean", "restart_mean", "difference",
                                "ci95_low", "ci95_high", "control_difference"])
    return fragment(
        "report_history.html", title=HISTORY_TITLE, runs=runs, sweep=row[0],
        summary=summary, chart=None if chart is None else figure(chart),
        table=table(shown, ["arm", "workload", "metric", "statistic", "load_point", "unit",
                            "previous_restart_mean", "restart_mean", "difference",
                            "ci95_low", "ci95_high", "control_difference", "change",
                            "config_change"])), chart
