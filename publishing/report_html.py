"""report.html: a static page (no server, no scripts) with the plots people would rather
look at than read. Plots are drawn by matplotlib as inline SVG; only published entries
and the requests behind them appear in the plots and tables, and blocked entries get a
section of their own.
"""

from __future__ import annotations

import html
import io
from pathlib import Path

import duckdb
import pandas as pd

from benchledger.publishing.evidence import (
    TITLES,
    other_evidence,
    rerun_entries,
    section_rows,
)
from benchledger.publishing.findings import FINDINGS_TITLE, speculation_finding_lines
from benchledger.publishing.frontier_report import frontier_section
from benchledger.publishing.read import (
    blocks,
    comparisons,
    delivered_vs_server,
    frontier,
    frontier_findings,
    published_entries,
    ruler,
    rules_behind_blocked,
)
from benchledger.publishing.report import load_point
from benchledger.stats import restart_interval_meaning
from benchledger.warehouse.db import query_frame

# Dots drawn per restart and entry; the entries themselves use every request.
DOTS_PER_RESTART = 200

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.2rem; margin-top: 2rem; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 0.5rem 0; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.4rem; text-align: left; }
th { background: #f3f3f3; } .blocked { background: #fff4f4; } .note { color: #555; }
figure { margin: 1rem 0; } figcaption { color: #555; font-size: 0.85rem; }
figure svg { max-width: 100%; height: auto; } .wide { overflow-x: auto; }
"""
COLUMNS = 3  # subplots per row


def _svg(fig) -> str:
    """The figure as inline SVG, byte-stable across runs (fixed ids, no date)."""
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog: inline SVG in HTML


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "benchledger", "font.size": 9,
                         "figure.dpi": 100, "axes.grid": True, "grid.alpha": 0.3})
    return plt


def plot_restart_dots(requests: pd.DataFrame, entries: pd.DataFrame) -> str | None:
    """Each restart's requests as dots, with the request- and restart-level intervals."""
    cells = entries[(entries["metric"] == "decode_rate") & (entries["scope"] != "aggregate")
                    & (entries["statistic"] == "mean")]
    if cells.empty:
        return None
    plt = _pyplot()
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
    return _svg(fig)


def plot_arms_side_by_side(entries: pd.DataFrame) -> str | None:
    """Mean decode rate with 95% CI per arm, code and prose side by side."""
    cells = entries[(entries["metric"] == "decode_rate") & (entries["scope"] != "aggregate")
                    & (entries["statistic"] == "mean")]
    cells = cells[cells["concurrency"] == cells.groupby("arm")["concurrency"].transform("min")]
    # one bar per arm and workload: on a rate ladder, its lowest rate
    cells = cells.sort_values("requested_rate_rps", na_position="first").drop_duplicates(
        ["arm", "workload"])
    if cells.empty:
        return None
    plt = _pyplot()
    workloads = sorted(cells["workload"].unique())
    arms = list(dict.fromkeys(cells["arm"]))
    fig, ax = plt.subplots(figsize=(max(4, 1.6 * len(arms) * len(workloads)), 3.2))
    width = 0.8 / len(workloads)
    for j, workload in enumerate(workloads):
        rows = cells[cells["workload"] == workload].set_index("arm").reindex(arms)
        low = (rows["value"] - rows["ci95_low"]).fillna(0)
        high = (rows["ci95_high"] - rows["value"]).fillna(0)
        ax.bar([i + j * width for i in range(len(arms))], rows["value"], width,
               yerr=[low, high], capsize=3, label=workload)
    ax.set_xticks([i + width * (len(workloads) - 1) / 2 for i in range(len(arms))], arms)
    ax.set_ylabel("decode rate (tok/s), mean with 95% CI")
    ax.legend(title="workload", fontsize=7)
    return _svg(fig)


def plot_ladder(entries: pd.DataFrame) -> str | None:
    """Per-user vs aggregate decode rate along the concurrency ladder (T6)."""
    decode = entries[(entries["metric"] == "decode_rate") & (entries["statistic"] == "mean")]
    ladders = decode.groupby(["arm", "workload"])["concurrency"].nunique()
    ladders = ladders[ladders > 1]
    if ladders.empty:
        return None
    plt = _pyplot()
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
    return _svg(fig)


def plot_ttft_vs_input(requests: pd.DataFrame) -> str | None:
    """TTFT against prompt length, warm and cold prompts apart (T7, T15)."""
    if requests.empty:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for (arm, cache), part in requests.groupby(["arm", "prompt_cache"]):
        ax.scatter(part["prompt_tokens"], part["ttft_s"], s=10, alpha=0.6,
                   label=f"{arm} ({cache})")
    ax.set_xlabel("prompt tokens (usage)")
    ax.set_ylabel("TTFT (s)")
    ax.legend(fontsize=7)
    return _svg(fig)


def plot_delivered_vs_log(frame: pd.DataFrame) -> str | None:
    """The delivered rate beside the server log's mean and peak (T2: 27.8 vs 40.7)."""
    frame = frame[frame["server_log_peak"].notna()]
    if frame.empty:
        return None
    plt = _pyplot()
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
    return _svg(fig)


def _table(frame: pd.DataFrame, columns: list[str], css: str = "") -> str:
    if frame.empty:
        return "<p class='note'>(none)</p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for _, row in frame[columns].iterrows():
        cells = "".join(f"<td>{html.escape(_cell(row[c]))}</td>" for c in columns)
        body.append(f"<tr class='{css}'>{cells}</tr>")
    return f"<div class='wide'><table><tr>{head}</tr>{''.join(body)}</table></div>"


def _cell(value) -> str:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _figure(svg: str | None, caption: str) -> str:
    if svg is None:
        return ""
    return f"<figure>{svg}<figcaption>{html.escape(caption)}</figcaption></figure>"


def _evidence_sections(entries: pd.DataFrame) -> list[str]:
    """One section per evidence kind from elsewhere (imports, historical rows), never in
    the plots or tables of this pipeline's own entries; a label its source did not record
    reads 'not recorded'."""
    parts = []
    for kind, frame in other_evidence(entries):
        rows = section_rows(frame)
        parts += [f"<h2>{html.escape(TITLES[kind])} (evidence {html.escape(kind)})</h2>",
                  "<p class='note'>Published under this label only, never compared with "
                  "another kind of evidence.</p>",
                  _table(rows, list(rows.columns))]
    return parts


def _published_windows(windows: pd.DataFrame) -> pd.DataFrame:
    """The windows a published entry rests on: the report shows nothing of the others."""
    return windows[windows["backs_published"].fillna(False).astype(bool)]


def _findings(lines: list[str]) -> list[str]:
    """What the evidence showed that the sweep did not say (issue #23): first, since it
    changes how the numbers below were judged; nothing where there is none."""
    if not lines:
        return []
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return [f"<h2>{html.escape(FINDINGS_TITLE)}</h2>", f"<ul class='findings'>{items}</ul>"]


def _energy_section(energy: pd.DataFrame) -> list[str]:
    """The energy entries (T18): every GPU of every node of the deployment, joules from
    their energy counters (or integrated power samples, as energy_source says)."""
    if energy.empty:
        return []
    return ["<h2>Energy (every GPU of the deployment)</h2>",
            "<p class='note'>Joules over each measured window from the energy counters of "
            "every GPU of every node the arm spans (after minus before the window), per "
            "output token its completed requests delivered; idle GPUs and failed requests "
            "count in the joules.</p>",
            _table(energy, ["arm", "workload", "metric", "concurrency", "value", "unit",
                            "restart_mean", "restart_ci95_low", "restart_ci95_high",
                            "n_restarts", "energy_source"])]


def render_report(con: duckdb.DuckDBPyConnection, run_id: str,
                  data_docs: Path | None = None) -> str:
    published = published_entries(con, run_id)
    entries = rerun_entries(published)  # plots and headline: this pipeline's own entries
    requests = query_frame(con, "report_requests", run_id=run_id,
                           per_restart=DOTS_PER_RESTART)
    requests = requests[requests["entry_id"].isin(entries["entry_id"])]
    delivered = delivered_vs_server(con, run_id)
    headline = entries[(entries["statistic"] == "mean")
                       & entries["metric"].isin(["decode_rate", "e2e_rate", "ttft",
                                                 "throughput"])].copy()
    df, reaches_zero, needed = restart_interval_meaning(
        headline["restart_mean"], headline["restart_ci95_high"], headline["n_restarts"])
    headline["restart_df"] = df
    headline["restart_ci_note"] = [
        ("reaches 0: too few restarts; " + (f"about {int(m)} would keep it above 0"
                                            if m == m else "none up to 1000 would"))
        if zero else "" for zero, m in zip(reaches_zero, needed, strict=True)]
    energy = entries[(entries["statistic"] == "mean")
                     & entries["metric"].isin(["energy_per_token", "tokens_per_joule",
                                               "gpu_power"])]
    decode_requests = requests[requests["metric"] == "decode_rate"]
    ttft_requests = requests[requests["metric"] == "ttft"]
    docs = (f"<p>Expectation results of this run as GX Data Docs: "
            f"<a href='{html.escape(str(data_docs))}'>{html.escape(str(data_docs))}</a></p>"
            if data_docs else "")
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>benchledger report: {html.escape(run_id)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>benchledger report: run {html.escape(run_id)}</h1>",
        "<p class='note'>Only validated (published) entries appear in the plots and tables "
        "below; entries that failed a rule are listed in their own section at the end. "
        "Rates count delivered tokens from per-request usage, never chunks.</p>", docs,
        *_findings(speculation_finding_lines(con, run_id)),
        "<h2>Headline entries</h2>",
        _table(headline, ["arm", "workload", "metric", "phase", "scope", "concurrency",
                          "numerator", "value", "unit", "ci95_low", "ci95_high",
                          "n_requests", "n_restarts", "restart_mean", "restart_ci95_low",
                          "restart_ci95_high", "restart_df", "restart_ci_note",
                          "restart_effect", "population",
                          "client_lag_p99_ms", "n_burst"]),
        *_energy_section(energy),
        "<h2>Requests per restart</h2>",
        _figure(plot_restart_dots(decode_requests, entries),
                f"Each dot is one measured request (at most {DOTS_PER_RESTART} per restart: "
                "a fixed sample where there are more); black: request-level mean and 95% "
                "interval; red: restart-level (mean of restart means, the honest width "
                "when restarts disagree)."),
        "<h2>Arms side by side</h2>",
        _figure(plot_arms_side_by_side(entries),
                "Mean decode rate per arm, code and prose side by side."),
        _figure(plot_ladder(entries), "Concurrency ladder: per-user vs aggregate (T6)."),
        *frontier_section(frontier(con, run_id), frontier_findings(con, run_id), _svg,
                          _pyplot, _figure, _table),
        "<h2>TTFT vs input length</h2>",
        _figure(plot_ttft_vs_input(ttft_requests),
                "Time to first token per request against its prompt tokens (at most "
                f"{DOTS_PER_RESTART} per restart and entry)."),
        "<h2>Delivered vs the server log</h2>",
        _figure(plot_delivered_vs_log(delivered),
                "Delivered throughput beside the server log's mean and peak lines: the "
                "log's peak is a lucky interval, not the delivered speed (T2)."),
        _table(delivered, list(delivered.columns)),
        "<h2>The ruler's own error (T17)</h2>",
        "<p class='note'>Per window behind a published entry: how late the measurement "
        "client was to stamp stream "
        "events (its event-loop lag, ms; empty: not measured), how busy its cores were, the "
        "share of content events that arrived in one read with another, and how many "
        "completed requests arrived in a burst (no decode rate: their tokens came at once). "
        "A lag beyond its bound blocks the window's per-request timing entries; its "
        "throughput still publishes, labelled with the lag.</p>",
        _table(_published_windows(ruler(con, run_id)),
               ["arm", "workload", "concurrency", "restart_index", "client_workers",
                "client_lag_p50_ms", "client_lag_p99_ms", "client_cpu_share",
                "bunched_event_fraction", "burst_requests", "completed_measured",
                "lag_within_bound", "lag_bound"]),
        "<h2>Comparisons</h2>",
        "<p class='note'>Each interval is Welch's over the two arms' restart means, with "
        "its degrees of freedom (df). <em>undecided</em>: an A/B interval that includes 0; "
        "<em>restarts_to_decide</em>: about how many restarts per arm would exclude 0 if "
        "the observed difference and spread between restarts held (empty: decided, or "
        "nothing to estimate from, or more than 1000).</p>",
        _table(comparisons(con, run_id),
               ["role", "a", "b", "workload", "metric", "concurrency", "difference",
                "ci95_low", "ci95_high", "df", "a_restarts", "b_restarts", "undecided",
                "restarts_to_decide", "ratio", "control_difference", "verdict",
                "reason"]),
        *_evidence_sections(published),
        "<h2>Blocked entries (not published)</h2>",
        # One row per entry and failed rule (entry_blocks), not the blocked_by text.
        _table(blocks(con, run_id),
               ["arm", "workload", "concurrency", "metric", "statistic", "rule", "subject",
                "expected", "found"], "blocked"),
        "<h3>Beneath the blocked entries: restarts left out, windows failed</h3>",
        "<p class='note'>Per rule that failed on this run's restarts, windows or requests: "
        "how many of the subjects it judged failed, with one example. An entry that fails "
        "only <code>entry_has_validated_value</code> had no window left behind it; the "
        "rules here say why (an <code>exclude_restart</code> rule such as "
        "<code>clock_under_load</code> leaves its restarts out).</p>",
        _table(rules_behind_blocked(con, run_id),
               ["rule", "effect", "suite", "n_failed", "n_checked", "example_subject",
                "example_expected", "example_found"], "blocked"),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
