"""The report's charts, drawn by matplotlib as SVG: inline in report.html and, the same
bytes with their XML prolog, as files under charts/ of the publication (a publishing job
embeds those). Only published entries and the requests behind them are drawn.

Byte-stable across runs: a fixed hash salt for the ids, no date in the metadata."""

from __future__ import annotations

import io
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import pandas as pd
from markupsafe import Markup

from benchledger.publishing.formatting import person_unit, person_value
from benchledger.publishing.report import load_point

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CHARTS_DIR = "charts"
COLUMNS = 3  # subplots per row
# Dots drawn per restart and entry; the entries themselves use every request.
DOTS_PER_RESTART = 200


@dataclass(frozen=True)
class Chart:
    """One chart: its file name (without .svg), heading, caption and SVG document."""

    name: str
    title: str
    caption: str
    svg: str

    @property
    def path(self) -> str:
        """Where the publication keeps it, relative to report.html."""
        return f"{CHARTS_DIR}/{self.name}.svg"


def error_bars(value: pd.Series, low: pd.Series, high: pd.Series) -> list[pd.Series]:
    """matplotlib's yerr/xerr from an interval: distances below and above the value, none
    (0) where there is no interval, never negative (an interval that misses its own mean,
    as a rounded bound can, draws no bar rather than failing)."""
    return [(value - low).fillna(0).clip(lower=0), (high - value).fillna(0).clip(lower=0)]


def pyplot() -> ModuleType:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "benchledger", "font.size": 9,
                         "figure.dpi": 100, "axes.grid": True, "grid.alpha": 0.3})
    return plt


def svg_document(fig: Figure) -> str:
    """The figure as a standalone SVG file's text, byte-stable (fixed ids, no date)."""
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def inline_svg(document: str) -> Markup:
    """The <svg> element of a document, for inline use in HTML (no XML prolog). Safe HTML
    as matplotlib writes it: its XML writer escapes every text it draws (a title, a
    legend's arm name), in its elements and in the comments beside them."""
    return Markup(document[document.index("<svg"):])


def _decode_cells(entries: pd.DataFrame) -> pd.DataFrame:
    return entries[(entries["metric"] == "decode_rate") & (entries["scope"] != "aggregate")
                   & (entries["statistic"] == "mean")]


def restart_dots(requests: pd.DataFrame, entries: pd.DataFrame) -> Chart | None:
    """Each restart's requests as dots, with the request- and restart-level intervals."""
    cells = _decode_cells(entries)
    if cells.empty:
        return None
    plt = pyplot()
    n = len(cells)
    columns = min(n, COLUMNS)
    rows = -(-n // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.4 * columns, 3.0 * rows),
                             squeeze=False, sharey=True)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    for ax, entry in zip(flat, cells.itertuples(), strict=False):
        mine = requests[requests["entry_id"] == entry.entry_id]
        restarts = sorted(mine["restart_id"].unique())
        for i, restart in enumerate(restarts):
            values = mine.loc[mine["restart_id"] == restart, "value"]
            ax.scatter([i] * len(values), values, s=10, alpha=0.6, label=None)
        right = len(restarts) + 0.2
        if not pd.isna(entry.ci95_low):
            ax.errorbar([right], [entry.value], yerr=[[entry.value - entry.ci95_low],
                                                      [entry.ci95_high - entry.value]],
                        fmt="o", color="black", capsize=4, label="request-level 95% CI")
        if not pd.isna(entry.restart_ci95_low):
            ax.errorbar([right + 0.5], [entry.restart_mean],
                        yerr=[[entry.restart_mean - entry.restart_ci95_low],
                              [entry.restart_ci95_high - entry.restart_mean]],
                        fmt="s", color="tab:red", capsize=4, label="restart-level 95% CI")
        ax.set_xticks(list(range(len(restarts))) + [right, right + 0.5],
                      [f"r{r.rsplit('/r', 1)[-1]}" for r in restarts] + ["req", "restart"])
        flag = " (restart effect)" if entry.restart_effect is True else ""
        ax.set_title(f"{entry.arm} / {entry.workload} {load_point(entry)}{flag}",
                     fontsize=8)
    for row in axes:
        row[0].set_ylabel("decode rate (tok/s), per request")
    flat[n - 1].legend(fontsize=7, loc="lower right")
    return Chart("requests-per-restart", "Requests per restart",
                 f"Each dot is one measured request (at most {DOTS_PER_RESTART} per restart: "
                 "a fixed sample where there are more); black: request-level mean and 95% "
                 "interval; red: restart-level (mean of restart means, the honest width "
                 "when restarts disagree).", svg_document(fig))


def arms_side_by_side(entries: pd.DataFrame) -> Chart | None:
    """Mean decode rate with 95% CI per arm at its lowest load, workloads side by side."""
    cells = _decode_cells(entries)
    cells = cells[cells["concurrency"] == cells.groupby("arm")["concurrency"].transform("min")]
    # one bar per arm and workload: on a rate ladder, its lowest rate
    cells = cells.sort_values("requested_rate_rps", na_position="first").drop_duplicates(
        ["arm", "workload"])
    if cells.empty:
        return None
    plt = pyplot()
    workloads = sorted(cells["workload"].unique())
    arms = list(dict.fromkeys(cells["arm"]))
    fig, ax = plt.subplots(figsize=(max(4, 1.6 * len(arms) * len(workloads)), 3.2))
    width = 0.8 / len(workloads)
    for j, workload in enumerate(workloads):
        rows = cells[cells["workload"] == workload].set_index("arm").reindex(arms)
        ax.bar([i + j * width for i in range(len(arms))], rows["value"], width,
               yerr=error_bars(rows["value"], rows["ci95_low"], rows["ci95_high"]),
               capsize=3, label=workload)
    ax.set_xticks([i + width * (len(workloads) - 1) / 2 for i in range(len(arms))], arms)
    ax.set_ylabel("decode rate (tok/s), mean with 95% CI")
    ax.legend(title="workload", fontsize=7)
    return Chart("arms-side-by-side", "Arms side by side",
                 "Mean decode rate per arm at its lowest load, workloads side by side.",
                 svg_document(fig))


def ladder(entries: pd.DataFrame) -> Chart | None:
    """Per-user vs aggregate decode rate along the concurrency ladder (T6)."""
    decode = entries[(entries["metric"] == "decode_rate") & (entries["statistic"] == "mean")]
    ladders = decode.groupby(["arm", "workload"])["concurrency"].nunique()
    ladders = ladders[ladders > 1]
    if ladders.empty:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for arm, workload in ladders.index:
        mine = decode[(decode["arm"] == arm) & (decode["workload"] == workload)]
        for aggregate, style in ((False, "o-"), (True, "s--")):
            part = mine[(mine["scope"] == "aggregate") == aggregate].sort_values("concurrency")
            label = f"{arm}/{workload} {'aggregate' if aggregate else 'per user'}"
            ax.plot(part["concurrency"], part["value"], style, label=label)
    ax.set_xlabel("concurrency (outstanding requests)")
    ax.set_ylabel("decode rate (tok/s)")
    ax.legend(fontsize=7)
    return Chart("concurrency-ladder", "Concurrency ladder",
                 "Per-user vs aggregate decode rate along the ladder (T6).", svg_document(fig))


def ttft_vs_input(requests: pd.DataFrame) -> Chart | None:
    """TTFT against prompt length, warm and cold prompts apart (T7, T15)."""
    if requests.empty:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for (arm, cache), part in requests.groupby(["arm", "prompt_cache"]):
        ax.scatter(part["prompt_tokens"], part["ttft_s"] * person_value(1.0, "s"), s=10,
                   alpha=0.6, label=f"{arm} ({cache})")
    ax.set_xlabel("prompt tokens (usage)")
    ax.set_ylabel(f"TTFT ({person_unit('s')})")
    ax.legend(fontsize=7)
    return Chart("ttft-vs-input", "TTFT vs input length",
                 "Time to first token per request against its prompt tokens (at most "
                 f"{DOTS_PER_RESTART} per restart and entry).", svg_document(fig))


def delivered_vs_log(frame: pd.DataFrame) -> Chart | None:
    """The delivered rate beside the server log's mean and peak (T2: 27.8 vs 40.7)."""
    frame = frame[frame["server_log_peak"].notna()]
    if frame.empty:
        return None
    plt = pyplot()
    labels = [f"{r.arm}\n{r.workload}" for r in frame.itertuples()]
    series = (("delivered throughput", "delivered_throughput"),
              ("server_log_mean", "server_log_mean"), ("server_log_peak", "server_log_peak"))
    fig, ax = plt.subplots(figsize=(max(5, 1.3 * len(labels)), 3.4))
    width = 0.8 / len(series)
    for j, (label, column) in enumerate(series):
        ax.bar([i + j * width for i in range(len(labels))], frame[column], width, label=label)
    ax.set_xticks([i + width for i in range(len(labels))], labels, fontsize=7)
    ax.set_ylabel("tok/s")
    ax.legend(fontsize=7)
    return Chart("delivered-vs-server-log", "Delivered vs the server log",
                 "Delivered throughput beside the server log's mean and peak lines: the "
                 "log's peak is a lucky interval, not the delivered speed (T2).",
                 svg_document(fig))


def length_histograms(bins: pd.DataFrame) -> Chart | None:
    """Per workload, requested against delivered lengths: input tokens asked for against
    the prompt tokens the server counted, max_tokens against the output tokens delivered
    (bins counted in the warehouse: queries/workload_lengths_for_run.sql)."""
    if bins.empty:
        return None
    plt = pyplot()
    workloads = list(dict.fromkeys(bins["workload"]))
    kinds = (("input", "input tokens"), ("output", "output tokens"))
    fig, axes = plt.subplots(len(workloads), 2, figsize=(7.5, 2.3 * len(workloads)),
                             squeeze=False, layout="constrained")
    for row, workload in zip(axes, workloads, strict=True):
        for ax, (kind, label) in zip(row, kinds, strict=True):
            mine = bins[(bins["workload"] == workload) & (bins["length"] == kind)]
            for side, color in (("requested", "tab:gray"), ("delivered", "tab:blue")):
                part = mine[mine["side"] == side]
                if not part.empty:
                    ax.bar(part["bin_low"], part["requests"], part["bin_high"] - part["bin_low"],
                           align="edge", alpha=0.55, color=color, label=side)
            unasked = " (no length requested)" if (mine["side"] != "requested").all() else ""
            ax.set_title(f"{workload}: {label}{unasked}", fontsize=8)
            ax.set_ylabel("requests")
            if mine.empty:
                ax.text(0.5, 0.5, "not recorded", ha="center", transform=ax.transAxes)
            else:
                ax.legend(fontsize=7)
    return Chart("workload-lengths", "Requested and delivered lengths",
                 "Per workload, measured requests behind published entries: input tokens "
                 "requested (synthetic and trace workloads) against the prompt tokens the "
                 "server reported, and max_tokens requested against the output tokens "
                 "delivered.", svg_document(fig))
