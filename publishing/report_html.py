"""report.html: one static page that reads top-down. First the run's verdicts, then a card
per arm with its headline numbers; then the charts (drawn by matplotlib as inline SVG, the
same charts written as files under charts/ by the export); then the workload that was
sent; then the blocked entries, grouped by the rule that blocked them; then what the
numbers rest on (the ruler's own error, provenance, raw files) and every published entry.

Only published entries and the requests behind them appear before the blocked section.
The page needs nothing from the network; its one small script sorts tables, opens and
closes every collapsed block, and opens them all for printing."""

from __future__ import annotations

import html
from dataclasses import dataclass

import duckdb
import pandas as pd

from benchledger.publishing.evidence import TITLES, other_evidence, rerun_entries, section_rows
from benchledger.publishing.findings import FINDINGS_TITLE, speculation_finding_lines
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
from benchledger.publishing.report_markup import details, esc, figure, interval, table
from benchledger.publishing.report_workload import (
    LENGTH_BINS,
    SAMPLES_PER_WORKLOAD,
    prepared_texts,
    workload_section,
)
from benchledger.warehouse.db import query_frame

BLOCKED_TITLE = "Blocked entries (not published)"
BENEATH_TITLE = "Beneath the blocked entries: restarts left out, windows failed"

STYLE = """
*, *::before, *::after { box-sizing: border-box; }
body { font-family: system-ui, sans-serif; margin: 0.8rem auto; max-width: 1320px;
       padding: 0 1rem; color: #222; line-height: 1.35; overflow-wrap: anywhere; }
h1 { font-size: 1.35rem; margin: 0.2rem 0; }
h2 { font-size: 1.15rem; margin: 1.1rem 0 0.3rem; border-bottom: 1px solid #ddd; }
h3 { font-size: 0.98rem; margin: 0.6rem 0 0.2rem; }
h4 { font-size: 0.82rem; margin: 0.3rem 0 0.1rem; color: #444; }
.note, .none { color: #555; font-size: 0.8rem; margin: 0.15rem 0; }
.none { font-size: 0.95rem; color: #333; }
table { border-collapse: collapse; font-size: 0.78rem; margin: 0.3rem 0; width: 100%;
        table-layout: fixed; }
th, td { border: 1px solid #ccc; padding: 0.12rem 0.3rem; text-align: left;
         vertical-align: top; overflow-wrap: anywhere; }
th { background: #f3f3f3; } .blocked td { background: #fff4f4; }
table.sortable th { cursor: pointer; }
.controls { margin-left: 0.5rem; }
.controls button { font-size: 0.78rem; margin-right: 0.3rem; }
.verdicts { list-style: none; padding: 0; margin: 0.2rem 0; }
.verdict { border-left: 5px solid #888; background: #f6f6f6; padding: 0.2rem 0.5rem;
           margin: 0.2rem 0; font-size: 0.86rem; break-inside: avoid; }
.verdict.finding { border-color: #1a7f37; background: #edf7ef; }
.verdict.refuted { border-color: #b35900; background: #fff3e3; }
.verdict.undecidable { border-color: #a40e26; background: #fdf0f1; }
.verdict .word { font-weight: 700; text-transform: uppercase; font-size: 0.76rem;
                 margin-right: 0.3rem; }
.reason { color: #555; font-size: 0.74rem; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(380px, 1fr));
         gap: 0.5rem; }
.card { border: 1px solid #c8c8c8; border-radius: 6px; padding: 0.2rem 0.5rem 0.3rem;
        break-inside: avoid; min-width: 0; }
.card h3 { margin: 0.1rem 0; }
.number { display: grid; grid-template-columns: 9.5rem 6.5rem 1fr; column-gap: 0.4rem;
          align-items: baseline; margin: 0.15rem 0 0.2rem; font-size: 0.78rem;
          line-height: 1.25; }
.number .value { font-weight: 700; font-size: 0.92rem; }
.number .spread { color: #333; font-size: 0.76rem; }
.number .labels { grid-column: 1 / -1; color: #666; font-size: 0.68rem; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(480px, 1fr));
          gap: 0.8rem; }
figure { margin: 0.3rem 0; min-width: 0; break-inside: avoid; }
figure.wide { grid-column: 1 / -1; }
figure svg { display: block; max-width: 100%; height: auto; }
figcaption { color: #555; font-size: 0.78rem; }
pre.prompt { white-space: pre-wrap; overflow-wrap: anywhere; font-size: 0.75rem;
             background: #f6f6f6; padding: 0.2rem 0.4rem; margin: 0.1rem 0 0.4rem;
             max-height: 7.5em; overflow: hidden; }
.samples { padding-left: 1.1rem; font-size: 0.82rem; }
details { margin: 0.3rem 0; } summary { cursor: pointer; font-size: 0.85rem; }
code { font-size: 0.85em; }
@media print {
  body { max-width: none; margin: 0; font-size: 10pt; }
  .controls { display: none; }
  .card, figure, .verdict, tr, pre.prompt { break-inside: avoid; }
  h2, h3, h4 { break-after: avoid; }
  pre.prompt { max-height: none; }
}
"""

# Sorts a table by the column clicked (numbers as numbers), opens or closes every collapsed
# block, and opens them all while printing. It marks the page when it has run.
SCRIPT = """
(function () {
  var all = function (selector) { return Array.prototype.slice.call(
    document.querySelectorAll(selector)); };
  var setOpen = function (open) { all('details').forEach(function (d) { d.open = open; }); };
  var controls = document.getElementById('controls');
  controls.hidden = false;
  controls.querySelector('[data-action=expand]').addEventListener('click', function () {
    setOpen(true); });
  controls.querySelector('[data-action=collapse]').addEventListener('click', function () {
    setOpen(false); });
  var closedBeforePrint = [];
  window.addEventListener('beforeprint', function () {
    closedBeforePrint = all('details:not([open])');
    closedBeforePrint.forEach(function (d) { d.open = true; });
  });
  window.addEventListener('afterprint', function () {
    closedBeforePrint.forEach(function (d) { d.open = false; });
  });
  var value = function (row, i) { return row.cells[i] ? row.cells[i].textContent : ''; };
  var compare = function (a, b) {
    var x = a.trim() === '' ? NaN : Number(a), y = b.trim() === '' ? NaN : Number(b);
    if (!isNaN(x) && !isNaN(y)) { return x - y; }
    return a.localeCompare(b, undefined, { numeric: true });
  };
  all('table.sortable').forEach(function (t) {
    Array.prototype.forEach.call(t.tHead.rows[0].cells, function (th, i) {
      th.title = 'sort by this column';
      th.addEventListener('click', function () {
        var body = t.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        var up = th.dataset.sorted !== 'up';
        rows.sort(function (a, b) { return (up ? 1 : -1) * compare(value(a, i), value(b, i)); });
        rows.forEach(function (r) { body.appendChild(r); });
        Array.prototype.forEach.call(t.tHead.rows[0].cells, function (c) {
          delete c.dataset.sorted; });
        th.dataset.sorted = up ? 'up' : 'down';
      });
    });
  });
  document.documentElement.dataset.script = 'ran';
})();
"""


@dataclass(frozen=True)
class Report:
    """The page and the charts it draws (the export writes each as charts/<name>.svg)."""

    html: str
    charts: list[Chart]


def _findings(lines: list[str]) -> list[str]:
    """What the evidence showed that the sweep did not say (issue #23): right after the
    verdicts, since it changes how the numbers below were judged; nothing where none."""
    if not lines:
        return []
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return [f"<h2>{html.escape(FINDINGS_TITLE)}</h2>", f"<ul class='findings'>{items}</ul>"]


def _charts(entries: pd.DataFrame, requests: pd.DataFrame, delivered: pd.DataFrame,
            points: pd.DataFrame) -> tuple[list[Chart], list[str]]:
    """The charts of the published entries, and the section that shows them."""
    front = frontier_charts(points)
    charts = [c for c in (
        restart_dots(requests[requests["metric"] == "decode_rate"], entries),
        arms_side_by_side(entries), ladder(entries),
        ttft_vs_input(requests[requests["metric"] == "ttft"]),
        delivered_vs_log(delivered)) if c is not None]
    shown = [*(figure(c) for c in charts if c.name != "delivered-vs-server-log"),
             *frontier_parts(points, front),
             *(figure(c) for c in charts if c.name == "delivered-vs-server-log")]
    parts = ["<section id='charts'><h2>Charts</h2>",
             "<div class='charts'>", *shown, "</div>",
             details("Delivered numbers beside the server's own (per arm and workload)",
                     table(delivered, list(delivered.columns))),
             "</section>"]
    return [*charts, *front], parts


def _blocked_section(blocked: pd.DataFrame, beneath: pd.DataFrame) -> list[str]:
    """Blocked entries grouped by the rule that blocked them, each with what the rule
    expected and found; then the rules that failed beneath them (restarts, windows)."""
    parts = [f"<section id='blocked'><h2>{BLOCKED_TITLE}</h2>"]
    if blocked.empty:
        parts.append("<p class='none'>None: every entry of this run passed every rule.</p>")
    blocked = blocked.assign(rule=blocked["rule"].fillna("(no rule recorded)"))
    for rule, mine in blocked.groupby("rule", sort=True):
        count = mine["entry_id"].nunique()
        parts += [f"<h3>{html.escape(str(rule))} ({count} entr{'y' if count == 1 else 'ies'})</h3>",
                  table(mine, ["arm", "workload", "concurrency", "metric", "statistic",
                               "subject", "expected", "found"], "blocked")]
    parts += [f"<h3>{BENEATH_TITLE}</h3>",
              "<p class='note'>Per rule that failed on this run's restarts, windows or "
              "requests: how many of the subjects it judged failed, with one example. An "
              "entry that fails only <code>entry_has_validated_value</code> had no window "
              "left behind it; the rules here say why (an <code>exclude_restart</code> rule "
              "such as <code>clock_under_load</code> leaves its restarts out).</p>",
              table(beneath, ["rule", "effect", "suite", "n_failed", "n_checked",
                              "example_subject", "example_expected", "example_found"],
                    "blocked"),
              "</section>"]
    return parts


def _energy_section(entries: pd.DataFrame) -> list[str]:
    """The energy entries (T18): every GPU of every node of the deployment, joules from
    their energy counters (or integrated power samples, as energy_source says)."""
    energy = entries[(entries["statistic"] == "mean")
                     & entries["metric"].isin(["energy_per_token", "tokens_per_joule",
                                               "gpu_power"])]
    if energy.empty:
        return []
    return ["<h2>Energy (every GPU of the deployment)</h2>",
            "<p class='note'>Joules over each measured window from the energy counters of "
            "every GPU of every node the arm spans (after minus before the window), per "
            "output token its completed requests delivered; idle GPUs and failed requests "
            "count in the joules.</p>",
            details(f"{len(energy)} entries", table(
                energy, ["arm", "workload", "metric", "concurrency", "value", "unit",
                         "restart_mean", "restart_ci95_low", "restart_ci95_high",
                         "n_restarts", "energy_source"]))]


def _evidence_sections(published: pd.DataFrame) -> list[str]:
    """One section per evidence kind from elsewhere (imports, historical rows), never in
    the cards or charts of this pipeline's own entries; a label its source did not record
    reads 'not recorded'."""
    parts = []
    for kind, frame in other_evidence(published):
        rows = section_rows(frame)
        parts += [f"<h2>{html.escape(TITLES[kind])} (evidence {html.escape(kind)})</h2>",
                  "<p class='note'>Published under this label only, never compared with "
                  "another kind of evidence.</p>",
                  details(f"{len(rows)} rows", table(rows, list(rows.columns)))]
    return parts


def _ruler_section(windows: pd.DataFrame) -> list[str]:
    shown = windows[windows["backs_published"].fillna(False).astype(bool)]
    return [
        "<h2>The ruler's own error (T17)</h2>",
        "<p class='note'>Per window behind a published entry: how late the measurement "
        "client was to stamp stream events (its event-loop lag, ms; empty: not measured), "
        "how busy its cores were, the share of content events that arrived in one read "
        "with another, and how many completed requests arrived in a burst (no decode "
        "rate: their tokens came at once). A lag beyond its bound blocks the window's "
        "per-request timing entries; its throughput still publishes, labelled with the "
        "lag.</p>",
        details(f"{len(shown)} windows", table(
            shown, ["arm", "workload", "concurrency", "restart_index", "client_workers",
                    "client_lag_p50_ms", "client_lag_p99_ms", "client_cpu_share",
                    "bunched_event_fraction", "burst_requests", "completed_measured",
                    "lag_within_bound", "lag_bound"]))]


def _provenance_section(run: pd.DataFrame, servers: pd.DataFrame, files: pd.DataFrame,
                        compared: pd.DataFrame, data_docs: str | None) -> list[str]:
    facts = [] if run.empty else [
        ("run", run["run_id"].iloc[0]), ("sweep", run["sweep_name"].iloc[0]),
        ("sweep sha256", run["sweep_sha256"].iloc[0]),
        ("harness version", run["harness_version"].iloc[0]),
        ("evidence", run["evidence"].iloc[0])]
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{esc(v)}</td></tr>" for k, v in facts)
    # Named, not linked: GX's pages load their scripts from public CDNs, so they stay with
    # the run's data and out of a publication, which opens offline (publishing/export.py).
    docs = (f"<p>Expectation results of this run as GX Data Docs are kept with the run's "
            f"data, not in this publication (their pages load scripts and styles from "
            f"public CDNs): <code>{html.escape(data_docs)}</code> in the data dir the run "
            f"was measured with. Each rule result is also a row of the warehouse's "
            f"<code>validations</code> (<code>benchledger explain ENTRY_ID</code> lists "
            f"those behind an entry).</p>" if data_docs else "")
    kinds = ", ".join(f"{n} {k}" for k, n in files.groupby("kind").size().items())
    return [
        "<section id='provenance'><h2>Provenance</h2>",
        f"<table class='facts'><colgroup><col style='width: 12rem'><col></colgroup>"
        f"<tbody>{rows}</tbody></table>" if rows else "",
        "<h3>Servers and nodes per arm</h3>",
        table(servers, ["arm", "nodes", "server_kind", "server_version",
                        "effective_config_sha256", "restarts"]),
        details(f"Raw files: {len(files)} ({kinds or 'none recorded'})",
                table(files, ["kind", "name", "rows", "sha256"])),
        details(f"Every comparison ({len(compared)}, A/A controls included)",
                table(compared, ["role", "a", "b", "workload", "metric", "load_point",
                                 "difference", "ci95_low", "ci95_high", "df", "a_restarts",
                                 "b_restarts", "undecided", "restarts_to_decide", "ratio",
                                 "control_difference", "verdict", "reason"])),
        docs, "</section>"]


def _entry_table(entries: pd.DataFrame) -> list[str]:
    """Every published entry of this pipeline, with the labels a reader needs (entries.csv
    has every column), collapsed, sortable."""
    shown = pd.DataFrame({
        "arm": entries["arm"], "workload": entries["workload"], "metric": entries["metric"],
        "statistic": entries["statistic"], "phase": entries["phase"],
        "scope": entries["scope"], "load": [load_point(e) for e in entries.itertuples()],
        "numerator": entries["numerator"], "value": entries["value"],
        "unit": entries["unit"],
        "95% CI": [interval(lo, hi) for lo, hi in zip(entries["ci95_low"],
                                                       entries["ci95_high"], strict=True)],
        "restart 95% CI": [interval(lo, hi) for lo, hi in zip(
            entries["restart_ci95_low"], entries["restart_ci95_high"], strict=True)],
        "requests": entries["n_requests"], "restarts": entries["n_restarts"],
        "population": entries["population"]})
    body = table(shown, list(shown.columns)).replace("<table>", "<table class='sortable'>", 1)
    return ["<section id='entries'><h2>Every published entry</h2>",
            details(f"{len(shown)} entries (click a column to sort; entries.csv holds every "
                    "label)", body), "</section>"]


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
    charts, chart_parts = _charts(entries, requests, delivered_vs_server(con, run_id),
                                  frontier(con, run_id))
    samples = workload_samples(con, run_id, SAMPLES_PER_WORKLOAD)
    history_parts, history_chart = history_section(con, run_id, figure, table)
    if history_chart is not None:
        charts.append(history_chart)
    lengths, length_bins = workload_lengths(con, run_id, LENGTH_BINS)
    lengths_chart = length_histograms(length_bins)
    if lengths_chart is not None:
        charts.append(lengths_chart)
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>benchledger report: {html.escape(run_id)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>benchledger report: run {html.escape(run_id)}</h1>",
        "<p class='note'>Only validated (published) entries appear above the blocked "
        "entries' section. Rates count delivered tokens from per-request usage, never "
        "chunks. <span class='controls' id='controls' hidden><button type='button' "
        "data-action='expand'>Expand all</button><button type='button' "
        "data-action='collapse'>Collapse all</button></span></p>",
        *verdicts_section(compared, frontier_findings(con, run_id)),
        *_findings(speculation_finding_lines(con, run_id)),
        *cards_section(entries),
        *chart_parts,
        # after this run's charts, how the same numbers moved over the sweep's earlier
        # runs is what a reader asks next
        *history_parts,
        *workload_section(samples, lengths, lengths_chart,
                          prepared_texts(samples, prepared_workloads(con, run_id))),
        *_blocked_section(blocks(con, run_id), rules_behind_blocked(con, run_id)),
        *_energy_section(entries),
        *_evidence_sections(published),
        *_ruler_section(ruler(con, run_id)),
        *_provenance_section(run_provenance(con, run_id), arm_servers(con, run_id),
                             raw_files(con, run_id), compared, data_docs),
        *_entry_table(entries),
        f"<script>{SCRIPT}</script>",
        "</body></html>",
    ]
    return Report("\n".join(part for part in parts if part) + "\n", charts)


def render_report(con: duckdb.DuckDBPyConnection, run_id: str,
                  data_docs: str | None = None) -> str:
    """report.html's text (build_report also returns its charts)."""
    return build_report(con, run_id, data_docs).html
