"""report.html: one static page that reads top-down. First the run's verdicts, then a card
per arm with its headline numbers; then the charts (drawn by matplotlib as inline SVG, the
same charts written as files under charts/ by the export); then the workload that was
sent; then the blocked entries, grouped by the rule that blocked them; then what the
numbers rest on (the ruler's own error, provenance, raw files) and every published entry.

Only published entries and the requests behind them appear before the blocked section.
The page needs nothing from the network; its one small script sorts tables, opens and
closes every collapsed block, and opens them all for printing."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import pandas as pd
from markupsafe import Markup

from benchledger.publishing.evidence import TITLES, other_evidence, rerun_entries, section_rows
from benchledger.publishing.findings import FINDINGS_TITLE, speculation_finding_lines
from benchledger.publishing.formatting import interval, person_frame
from benchledger.publishing.frontier_report import frontier_charts, frontier_parts
from benchledger.publishing.history import history_section
from benchledger.publishing.read import (
    arm_servers,
    blocks,
    comparisons,
    delivered_vs_server,
    frontier,
    frontier_findings,
    prepared_workloads,
    published_entries,
    raw_files,
    ruler,
    rules_behind_blocked,
    run_provenance,
    workload_lengths,
    workload_samples,
)
from benchledger.publishing.report import load_point
from benchledger.publishing.report_cards import cards_section, verdicts_section
from benchledger.publishing.report_charts import (
    DOTS_PER_RESTART,
    Chart,
    arms_side_by_side,
    delivered_vs_log,
    ladder,
    length_histograms,
    restart_dots,
    ttft_vs_input,
)
from benchledger.publishing.report_markup import figure, table
from benchledger.publishing.report_workload import (
    LENGTH_BINS,
    SAMPLES_PER_WORKLOAD,
    prepared_texts,
    workload_section,
)
from benchledger.publishing.templating import fragment, render
from benchledger.warehouse.db import query_frame

BLOCKED_TITLE = "Blocked entries (not published)"
BENEATH_TITLE = "Beneath the blocked entries: restarts left out, windows failed"


@dataclass(frozen=True)
class Report:
    """The page and the charts it draws (the export writes each as charts/<name>.svg)."""

    html: str
    charts: list[Chart]


def _findings(lines: list[str]) -> Markup:
    """What the evidence showed that the sweep did not say (issue #23): right after the
    verdicts, since it changes how the numbers below were judged; nothing where none."""
    return fragment("report_findings.html", title=FINDINGS_TITLE, lines=lines)


def _charts(entries: pd.DataFrame, requests: pd.DataFrame, delivered: pd.DataFrame,
            points: pd.DataFrame) -> tuple[list[Chart], Markup]:
    """The charts of the published entries, and the section that shows them."""
    front = frontier_charts(points)
    charts = [c for c in (
        restart_dots(requests[requests["metric"] == "decode_rate"], entries),
        arms_side_by_side(entries), ladder(entries),
        ttft_vs_input(requests[requests["metric"] == "ttft"]),
        delivered_vs_log(delivered)) if c is not None]
    log = "delivered-vs-server-log"  # last: after the frontier, beside its table
    section = fragment(
        "report_charts.html",
        figures=[figure(c) for c in charts if c.name != log],
        frontier=frontier_parts(points, front),
        log_figures=[figure(c) for c in charts if c.name == log],
        delivered=table(delivered, list(delivered.columns)))
    return [*charts, *front], section


def _blocked_section(blocked: pd.DataFrame, beneath: pd.DataFrame) -> Markup:
    """Blocked entries grouped by the rule that blocked them, each with what the rule
    expected and found; then the rules that failed beneath them (restarts, windows)."""
    columns = ["arm", "workload", "concurrency", "metric", "statistic", "subject",
               "expected", "found"]
    blocked = blocked.assign(rule=blocked["rule"].fillna("(no rule recorded)"))
    groups = [(str(rule), mine["entry_id"].nunique(), table(mine, columns, "blocked"))
              for rule, mine in blocked.groupby("rule", sort=True)]
    return fragment("report_blocked.html", title=BLOCKED_TITLE, beneath_title=BENEATH_TITLE,
                    groups=groups, beneath=table(
                        beneath, ["rule", "effect", "suite", "n_failed", "n_checked",
                                  "example_subject", "example_expected", "example_found"],
                        "blocked"))


def _energy_section(entries: pd.DataFrame) -> Markup:
    """The energy entries (T18): every GPU of every node of the deployment, joules from
    their energy counters (or integrated power samples, as energy_source says)."""
    energy = entries[(entries["statistic"] == "mean")
                     & entries["metric"].isin(["energy_per_token", "tokens_per_joule",
                                               "gpu_power"])]
    return fragment("report_energy.html", count=len(energy), table=table(
        energy, ["arm", "workload", "metric", "concurrency", "value", "unit",
                 "restart_mean", "restart_ci95_low", "restart_ci95_high", "n_restarts",
                 "energy_source"]))


def _evidence_sections(published: pd.DataFrame) -> Markup:
    """One section per evidence kind from elsewhere (imports, historical rows), never in
    the cards or charts of this pipeline's own entries; a label its source did not record
    reads 'not recorded'."""
    sections = []
    for kind, frame in other_evidence(published):
        rows = section_rows(person_frame(frame, ["value"]))  # a latency in ms
        sections.append((TITLES[kind], kind, len(rows), table(rows, list(rows.columns))))
    return fragment("report_evidence.html", sections=sections)


def _ruler_section(windows: pd.DataFrame) -> Markup:
    shown = windows[windows["backs_published"].fillna(False).astype(bool)]
    return fragment("report_ruler.html", count=len(shown), table=table(
        shown, ["arm", "workload", "concurrency", "restart_index", "client_workers",
                "client_lag_p50_ms", "client_lag_p99_ms", "client_cpu_share",
                "bunched_event_fraction", "burst_requests", "completed_measured",
                "lag_within_bound", "lag_bound"]))


def _provenance_section(run: pd.DataFrame, servers: pd.DataFrame, files: pd.DataFrame,
                        compared: pd.DataFrame, data_docs: str | None) -> Markup:
    facts = [] if run.empty else [
        ("run", run["run_id"].iloc[0]), ("sweep", run["sweep_name"].iloc[0]),
        ("sweep sha256", run["sweep_sha256"].iloc[0]),
        ("harness version", run["harness_version"].iloc[0]),
        ("evidence", run["evidence"].iloc[0])]
    kinds = ", ".join(f"{n} {k}" for k, n in files.groupby("kind").size().items())
    # differences in the unit a person reads (a latency's in ms), named beside them
    shown = person_frame(compared, ["difference", "ci95_low", "ci95_high",
                                    "control_difference", "detectable_effect",
                                    "paired_difference", "paired_ci95_low",
                                    "paired_ci95_high"])
    return fragment(
        "report_provenance.html", facts=facts, data_docs=data_docs,
        servers=table(servers, ["arm", "nodes", "server_kind", "server_version",
                                "effective_config_sha256", "restarts"]),
        files_summary=f"Raw files: {len(files)} ({kinds or 'none recorded'})",
        files=table(files, ["kind", "name", "rows", "sha256"]),
        compared_summary=f"Every comparison ({len(compared)}, A/A controls included)",
        compared=table(shown, ["role", "a", "b", "workload", "metric", "unit", "load_point",
                               "difference", "ci95_low", "ci95_high", "df", "a_restarts",
                               "b_restarts", "undecided", "restarts_to_decide",
                               "detectable_effect", "detectable_relative", "smallest_effect",
                               "paired_difference", "paired_ci95_low", "paired_ci95_high",
                               "drift", "drift_ci95_low", "drift_ci95_high",
                               "restart_order", "ratio",
                               "control_difference", "verdict", "reason"]))


def _entry_table(entries: pd.DataFrame) -> Markup:
    """Every published entry of this pipeline, with the labels a reader needs (entries.csv
    has every column, in SI units; here a latency reads in ms), collapsed, sortable."""
    people = person_frame(entries, ["value", "ci95_low", "ci95_high", "restart_ci95_low",
                                    "restart_ci95_high"])
    shown = pd.DataFrame({
        "arm": people["arm"], "workload": people["workload"], "metric": people["metric"],
        "statistic": people["statistic"], "phase": people["phase"],
        "scope": people["scope"], "load": [load_point(e) for e in people.itertuples()],
        "numerator": people["numerator"], "value": people["value"],
        "unit": people["unit"],
        "95% CI": [interval(lo, hi) for lo, hi in zip(people["ci95_low"],
                                                       people["ci95_high"], strict=True)],
        "restart 95% CI": [interval(lo, hi) for lo, hi in zip(
            people["restart_ci95_low"], people["restart_ci95_high"], strict=True)],
        "requests": people["n_requests"], "restarts": people["n_restarts"],
        "population": people["population"]})
    return fragment("report_entries.html", count=len(shown),
                    table=table(shown, list(shown.columns), css="sortable"))


# How the simulator names itself in restarts.server_version (benchledger/simulator/engine.py
# VERSION; a test keeps the two together: publishing does not import the simulator).
SIMULATOR_VERSION = "benchledger-sim"


def simulated_arms(servers: pd.DataFrame) -> list[str]:
    """The arms whose server was benchledger's simulator (an arm of kind simulator, or a
    command that started it: its version says so), for the page's first lines: their
    GPUs, clocks and energy are pretend, and a reader must know before reading a number."""
    kind = servers["server_kind"].fillna("").astype(str)
    version = servers["server_version"].fillna("").astype(str)
    mask = kind.str.contains("simulator") | version.str.startswith(SIMULATOR_VERSION)
    return [str(arm) for arm in servers.loc[mask, "arm"]]


def build_report(con: duckdb.DuckDBPyConnection, run_id: str,
                 data_docs: str | None = None) -> Report:
    """report.html and its charts; `data_docs`: where the run's GX Data Docs are kept
    (named as text, never linked: export.data_docs_location)."""
    published = published_entries(con, run_id)
    entries = rerun_entries(published)  # cards and charts: this pipeline's own entries
    requests = query_frame(con, "report_requests", run_id=run_id,
                           per_restart=DOTS_PER_RESTART)
    requests = requests[requests["entry_id"].isin(entries["entry_id"])]
    compared = comparisons(con, run_id)
    servers = arm_servers(con, run_id)
    charts, charts_section = _charts(entries, requests, delivered_vs_server(con, run_id),
                                     frontier(con, run_id))
    samples = workload_samples(con, run_id, SAMPLES_PER_WORKLOAD)
    history, history_chart = history_section(con, run_id)
    if history_chart is not None:
        charts.append(history_chart)
    lengths, length_bins = workload_lengths(con, run_id, LENGTH_BINS)
    lengths_chart = length_histograms(length_bins)
    if lengths_chart is not None:
        charts.append(lengths_chart)
    sections = [
        verdicts_section(compared, frontier_findings(con, run_id)),
        _findings(speculation_finding_lines(con, run_id)),
        cards_section(entries),
        charts_section,
        # after this run's charts, how the same numbers moved over the sweep's earlier
        # runs is what a reader asks next
        history,
        workload_section(samples, lengths, lengths_chart,
                         prepared_texts(samples, prepared_workloads(con, run_id))),
        _blocked_section(blocks(con, run_id), rules_behind_blocked(con, run_id)),
        _energy_section(entries),
        _evidence_sections(published),
        _ruler_section(ruler(con, run_id)),
        _provenance_section(run_provenance(con, run_id), servers,
                            raw_files(con, run_id), compared, data_docs),
        _entry_table(entries),
    ]
    page = render("report_page.html", run_id=run_id, sections=[s for s in sections if s],
                  simulated=simulated_arms(servers))
    return Report(page, charts)


def render_report(con: duckdb.DuckDBPyConnection, run_id: str,
                  data_docs: str | None = None) -> str:
    """report.html's text (build_report also returns its charts)."""
    return build_report(con, run_id, data_docs).html
