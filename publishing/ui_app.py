"""The benchledger page in the Airflow UI (issue #28): a deployment's sweeps and runs, each
run's verdicts and its published and blocked entries, a sweep's history, and each entry's
lineage, as plain server-rendered HTML. The Airflow UI shows it in an iframe; it needs no
script and loads nothing from elsewhere. Every table shows at most PAGE_ROWS rows, with its
count and links to the next and previous page (publishing/ui_paging.py): a page is bounded
however many entries, runs or requests the warehouse holds.

Every page opens the warehouse read-only (warehouse.db.connect: DuckDB's read-only mode and
the auditor's lockdown), reads what it shows through publishing/read.py and closes it
again before answering: a reader's lock keeps the pipeline's writers out, so none is held
between pages, and a page gives way at once to a writer waiting for the file. A warehouse a
run is writing answers "warehouse busy, reload" (HTTP 503), never a stack trace.

Which warehouses it reads and who may look are its caller's: operators/ui_plugin.py mounts
it in Airflow's API server behind Airflow's own authentication. Only a listed warehouse is
ever opened; a page names it by its path. No Airflow here (layer 3).
"""

from __future__ import annotations

import ast
import html
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from benchledger.publishing import read
from benchledger.publishing.explain import explain
from benchledger.publishing.history import UnknownSweep, history, history_chart_svg
from benchledger.publishing.ui_paging import PAGE_ROWS, Paged
from benchledger.publishing.ui_paging import href as _href
from benchledger.publishing.ui_paging import paged as _paged
from benchledger.publishing.ui_paging import pager as _pager
from benchledger.warehouse.db import WarehouseBusy, WarehouseError, connect
from benchledger.warehouse.writer_waiting import writer_is_waiting

# A page waits this long for a writer's lock before saying the warehouse is busy: a load
# holds it for seconds, and a reload is the auditor's to decide.
READ_WAIT_S = 2.0
# Bounds of one page's reads, as the auditor's SQL door bounds a query: the API server
# serves everyone else too.
READ_LIMITS = {"memory_limit": "512MB", "threads": "2"}
# `benchledger run --cluster` writes this constant into each DAG file it installs
# (cluster_run.DAG_FILE_TEMPLATE): the sweep's warehouse, its DAG param default.
DAG_FILE_GLOB = "benchledger_*.py"
WAREHOUSE_CONSTANT = "WAREHOUSE"

Warehouses = Callable[[], list[Path]]


def warehouses_in_dags(dags_folder: Path) -> list[Path]:
    """The warehouses of the sweeps installed in a DAGs folder: the WAREHOUSE constant of
    each DAG file `run --cluster` wrote (read as Python literals, never executed)."""
    found = []
    for dag_file in sorted(Path(dags_folder).glob(DAG_FILE_GLOB)):
        try:
            tree = ast.parse(dag_file.read_text())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id == WAREHOUSE_CONSTANT
                    and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str)):
                found.append(Path(node.value.value))
    return found


def listed_warehouses(configured: str, dags_folder: Path | None) -> list[Path]:
    """The warehouses a page may open: those `configured` names (comma-separated paths)
    and those of the sweeps installed in the DAGs folder, each once, in that order."""
    paths = [Path(p.strip()) for p in configured.split(",") if p.strip()]
    if dags_folder is not None:
        paths += warehouses_in_dags(dags_folder)
    return list(dict.fromkeys(p.expanduser().resolve() for p in paths))


class Unreadable(Exception):
    """A warehouse a page cannot read now: busy (a writer has it), missing or damaged."""

    def __init__(self, warehouse: Path, message: str, busy: bool):
        super().__init__(message)
        self.warehouse, self.message, self.busy = warehouse, message, busy


@contextmanager
def reading(warehouse: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection for one page, closed when the page is made."""
    if not warehouse.exists():
        raise Unreadable(warehouse, "no run has been loaded into it yet (the first run's "
                                    "load step creates the file)", busy=False)
    if writer_is_waiting(warehouse):
        raise Unreadable(warehouse, "a run's load is waiting to write it", busy=True)
    try:
        con = connect(warehouse, read_only=True, wait_s=READ_WAIT_S, limits=READ_LIMITS)
    except WarehouseBusy as exc:
        raise Unreadable(warehouse, str(exc), busy=True) from exc
    except WarehouseError as exc:
        raise Unreadable(warehouse, str(exc), busy=False) from exc
    try:
        yield con
    except duckdb.Error as exc:  # a warehouse older than these queries, or damaged
        raise Unreadable(warehouse, " ".join(str(exc).split()), busy=False) from exc
    finally:
        con.close()


# --- HTML -------------------------------------------------------------------------------

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 16px 24px; color: #1a1a1a; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 24px 0 6px; }
nav.crumbs { margin-bottom: 12px; color: #555; } nav.crumbs a { color: #1f5fa8; }
a { color: #1f5fa8; text-decoration: none; } a:hover { text-decoration: underline; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 4px 0 12px; }
th, td { border: 1px solid #d6d6d6; padding: 3px 8px; text-align: left; vertical-align: top;
         white-space: nowrap; }
th { background: #f2f2f2; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #fafafa; }
td.wrap { min-width: 260px; max-width: 520px; overflow-wrap: break-word;
          white-space: normal; }
.note { color: #555; max-width: 1100px; }
.busy, .problem { border: 1px solid #d9a400; background: #fff7d6; padding: 8px 12px;
                  max-width: 1100px; }
.problem { border-color: #c0392b; background: #fdecea; }
.published { color: #1e7b34; font-weight: 600; } .blocked { color: #b03a2e; font-weight: 600; }
pre { background: #f7f7f7; border: 1px solid #ddd; padding: 8px; overflow-x: auto;
      font-size: 12px; }
figure { margin: 8px 0; } figure svg { max-width: 100%; height: auto; }
p.pager { color: #555; margin: 2px 0 4px; } p.pager a { margin: 0 2px; }
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _missing(value: Any) -> bool:
    try:
        return value is None or bool(pd.isna(value))
    except (TypeError, ValueError):  # a list or array: present
        return False


def _number(value: Any) -> str:
    if _missing(value):
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()
                                  and abs(value) >= 1):
        return f"{value:,.0f}" if abs(value) >= 10_000 else f"{value:.0f}"
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.1f}"
    return str(value)


def _text(value: Any) -> str:
    if _missing(value):
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    return str(value)


def _interval(low: Any, high: Any) -> str:
    return "-" if _missing(low) or _missing(high) else f"[{_number(low)}, {_number(high)}]"


def _link(page: str, text: Any, **params: Any) -> str:
    return f'<a href="{_e(_href(page, **params))}">{_e(text)}</a>'


Cell = tuple[str, str]  # (html, css class)


def _table(table_id: str, headers: Sequence[str], rows: Iterable[Sequence[Cell]],
           row_attrs: Iterable[str] | None = None) -> str:
    attrs = list(row_attrs) if row_attrs is not None else None
    body = []
    for i, row in enumerate(rows):
        extra = f" {attrs[i]}" if attrs is not None else ""
        cells = "".join(f'<td class="{css}">{cell}</td>' if css else f"<td>{cell}</td>"
                        for cell, css in row)
        body.append(f"<tr{extra}>{cells}</tr>")
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    return (f'<div class="scroll"><table id="{table_id}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


def _t(value: Any) -> Cell:
    return _e(_text(value)), ""


def _n(value: Any) -> Cell:
    return _e(_number(value)), "num"


def _page(title: str, crumbs: Sequence[str], body: Iterable[str], status: int = 200
          ) -> HTMLResponse:
    trail = " › ".join(crumbs)
    return HTMLResponse(
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width'>"
        f"<title>{_e(title)} · benchledger</title><style>{STYLE}</style></head><body>"
        f"<nav class='crumbs'>{trail}</nav><h1>{_e(title)}</h1>{''.join(body)}</body></html>",
        status_code=status)


def _home_crumb() -> str:
    return '<a href="./">benchledger</a>'


def _warehouse_note(warehouse: Path) -> str:
    return f"<p class='note'>Warehouse <code>{_e(warehouse)}</code>, read-only.</p>"


def _unreadable_html(problem: Unreadable) -> str:
    if problem.busy:
        return (f"<div class='busy' role='status'><strong>Warehouse busy, reload.</strong> "
                f"A run is writing <code>{_e(problem.warehouse)}</code> (its load, validate "
                f"or derive step); reload this page in a few seconds. "
                f"<span class='note'>({_e(problem.message)})</span></div>")
    return (f"<div class='problem' role='alert'><strong>Warehouse not readable.</strong> "
            f"{_e(problem.message)}</div>")


# --- pages ------------------------------------------------------------------------------


def _sweeps_section(warehouse: Path, frame: pd.DataFrame) -> list[str]:
    if frame.empty:
        return [f"<p class='note'>No runs yet in <code>{_e(warehouse)}</code>.</p>"]
    rows = [[(_link("sweep", r.sweep_name, warehouse=warehouse, sweep=r.sweep_name), ""),
             _n(r.runs),
             (_link("run", r.newest_run_id, warehouse=warehouse, run=r.newest_run_id), ""),
             _t(r.newest_started_at), _n(r.published), _n(r.blocked), _t(r.verdicts)]
            for r in frame.itertuples()]
    return [_table("sweeps", ["sweep", "runs", "newest run", "started", "published",
                              "blocked", "verdicts (newest run)"], rows)]


def index_page(warehouses: list[Path]) -> HTMLResponse:
    body = ["<p class='note'>The sweeps of this deployment and their runs, read from each "
            "warehouse a sweep on it writes. Published entries passed every rule; a "
            "blocked entry names the rules that stopped it. Follow an entry to its "
            "lineage: windows, restarts, raw files and rule results.</p>"]
    if not warehouses:
        body.append("<div class='problem'>No warehouse known yet: run a sweep on this "
                    "deployment (<code>benchledger run SWEEP --warehouse FILE --cluster "
                    "HOME</code>), or list warehouses in <code>[benchledger] warehouses"
                    "</code> of airflow.cfg (docs/cluster.md, “The Airflow UI”).</div>")
    for warehouse in warehouses:
        body.append(f"<h2>Warehouse <code>{_e(warehouse)}</code></h2>")
        try:
            with reading(warehouse) as con:
                body += _sweeps_section(warehouse, read.sweeps(con))
        except Unreadable as problem:
            body.append(_unreadable_html(problem))
    return _page("benchledger: sweeps and runs", ["benchledger"], body)


# matplotlib's pyplot is not thread-safe, and the API server makes pages in threads.
_DRAWING = threading.Lock()


def _history_section(warehouse: Path, sweep_name: str, frame: pd.DataFrame,
                     history_page: int, runs_page: int) -> list[str]:
    """The sweep's headline entries across its runs: the chart of publishing/history.py
    (at most its MAX_PANELS panels) and one row per run and line, newest run first, each
    change judged against the sweep's A/A control; the table a page at a time (a sweep
    scheduled every hour has thousands of runs)."""
    parts = ["<h2>History</h2>",
             "<p class='note'>Each value is a run's restart-level mean with its 95% "
             "interval; a change is flagged only where the run-to-run interval excludes 0 "
             "and the difference exceeds what the sweep's A/A control shows. A "
             "configuration change (effective config, server version) starts a new line."
             "</p>"]
    paged = _paged("history_page", history_page, len(frame),
                   f"the history of sweep {sweep_name!r}")
    if frame.empty:
        return [*parts, "<p class='note'>No headline entries in this sweep's runs.</p>"]
    with _DRAWING:
        chart = history_chart_svg(frame)
    parts.append(f"<figure id='history-chart'>{chart}</figure>" if chart else
                 "<p class='note'>No chart yet: it needs two runs with published "
                 "headline entries.</p>")
    shown = frame.sort_values(
        ["started_at", "run_id", "arm", "workload", "metric", "statistic", "load_point"],
        ascending=[False, True, True, True, True, True, True]).iloc[
        paged.offset:paged.offset + PAGE_ROWS]
    parts.append(_pager("history", "rows", paged, "sweep", warehouse=warehouse,
                        sweep=sweep_name, runs_page=runs_page))
    rows = [[(_link("run", h.run_id, warehouse=warehouse, run=h.run_id), ""), _t(h.kind),
             _t(h.arm), _t(h.workload), _t(h.metric), _t(h.statistic), _t(h.load_point),
             _t(f"{_number(h.value)} {_interval(h.low, h.high)}" if h.publishable
                else "blocked"),
             _t(h.unit), (f"<strong>{_e(_text(h.change))}</strong>", ""),
             _n(h.difference), _t(_interval(h.ci95_low, h.ci95_high)),
             _n(h.control_difference), (_e(_text(h.config_change or None)), "wrap")]
            for h in shown.itertuples()]
    return [*parts, _table("history", ["run", "kind", "arm", "workload", "metric",
                                       "statistic", "load point", "value [95%]", "unit",
                                       "change", "difference", "95% interval",
                                       "A/A difference", "configuration change"], rows)]


def sweep_page(warehouse: Path, sweep_name: str, runs_page: int = 1,
               history_page: int = 1) -> HTMLResponse:
    with reading(warehouse) as con:
        total = read.sweep_run_count(con, sweep_name)
        if total == 0:
            raise HTTPException(404, f"no sweep {sweep_name!r} in {warehouse}")
        paged = _paged("runs_page", runs_page, total, f"the runs of sweep {sweep_name!r}")
        runs = read.runs_of_sweep(con, sweep_name, PAGE_ROWS, paged.offset)
        try:
            frame = history(con, sweep_name)
        except UnknownSweep:  # imported evidence only: no measured run to follow
            frame = pd.DataFrame()
    history_html = _history_section(warehouse, sweep_name, frame, history_page, runs_page)
    rows = [[(_link("run", r.run_id, warehouse=warehouse, run=r.run_id), ""),
             _t(r.started_at), _t(r.ended_at),
             _t("scheduled" if not _missing(r.scheduled_for) else "manual"),
             _t(r.evidence), _n(r.published), _n(r.blocked), _t(r.verdicts)]
            for r in runs.itertuples()]
    body = [_warehouse_note(warehouse), f"<h2>Runs ({total:,})</h2>",
            _pager("runs", "runs", paged, "sweep", warehouse=warehouse, sweep=sweep_name,
                   history_page=history_page),
            _table("runs", ["run", "started", "ended", "kind", "evidence", "published",
                            "blocked", "verdicts"], rows),
            *history_html]
    return _page(f"Sweep {sweep_name}", [_home_crumb(), _e(sweep_name)], body)


def _verdicts_table(warehouse: Path, frame: pd.DataFrame) -> str:
    if frame.empty:
        return "<p class='note'>This run's sweep declares no comparisons.</p>"

    def entry(entry_id: Any) -> Cell:
        return ("-", "") if _missing(entry_id) else (
            _link("entry", entry_id, warehouse=warehouse, entry=entry_id), "")

    rows = [[_t(c.role), _t(c.metric), _t(c.workload), _t(c.load_point), _t(c.a), _t(c.b),
             _n(c.a_mean), _n(c.b_mean), _n(c.difference), _t(_interval(c.ci95_low, c.ci95_high)),
             _n(c.control_difference), (f"<strong>{_e(c.verdict)}</strong>", ""),
             (_e(_text(c.reason)), "wrap"), entry(c.a_entry_id), entry(c.b_entry_id)]
            for c in frame.itertuples()]
    attrs = [f'data-comparison-id="{_e(c.comparison_id)}" data-verdict="{_e(c.verdict)}"'
             for c in frame.itertuples()]
    return _table("verdicts", ["role", "metric", "workload", "load point", "a", "b",
                               "a mean", "b mean", "b - a", "95% interval", "A/A difference",
                               "verdict", "reason", "a entry", "b entry"], rows, attrs)


def _published_table(warehouse: Path, frame: pd.DataFrame) -> str:
    if frame.empty:
        return "<p class='note'>No entry of this run passed every rule.</p>"
    rows = [[(_link("entry", p.entry_id, warehouse=warehouse, entry=p.entry_id), ""),
             _t(p.arm), _t(p.workload), _t(p.load_point), _t(p.metric), _t(p.statistic),
             _t(p.scope), _t(p.numerator), _n(p.value), _t(_interval(p.ci95_low, p.ci95_high)),
             _t(p.unit), _n(p.n_restarts), _n(p.n_requests)]
            for p in frame.itertuples()]
    attrs = [f'data-entry-id="{_e(p.entry_id)}"' for p in frame.itertuples()]
    return _table("published", ["entry", "arm", "workload", "load point", "metric",
                                "statistic", "scope", "numerator", "value", "95% interval",
                                "unit", "restarts", "requests"], rows, attrs)


def _blocked_table(warehouse: Path, frame: pd.DataFrame) -> str:
    if frame.empty:
        return "<p class='note'>No entry of this run is blocked.</p>"
    rows = [[(_link("entry", b.entry_id, warehouse=warehouse, entry=b.entry_id), ""),
             _t(b.arm), _t(b.workload), _t(b.concurrency), _t(b.metric), _t(b.statistic),
             (f"<span class='blocked'>{_e(_text(b.rule))}</span>", ""),
             (_e(_text(b.subject)), "wrap"), (_e(_text(b.expected)), "wrap"),
             (_e(_text(b.found)), "wrap")]
            for b in frame.itertuples()]
    attrs = [f'data-entry-id="{_e(b.entry_id)}" data-rule="{_e(_text(b.rule))}"'
             for b in frame.itertuples()]
    return _table("blocked", ["entry", "arm", "workload", "concurrency", "metric",
                              "statistic", "rule", "subject", "expected", "found"],
                  rows, attrs)


@dataclass(frozen=True)
class RunPages:
    """Which page of each of a run page's tables is asked for (1-based)."""

    verdicts_page: int = 1
    published_page: int = 1
    blocked_page: int = 1


def run_page(warehouse: Path, run_id: str, pages: RunPages = RunPages()) -> HTMLResponse:
    with reading(warehouse) as con:
        summary = read.run_summary(con, run_id)
        if summary is None:
            raise HTTPException(404, read.unknown_run_message(con, run_id))
        counts = read.run_page_counts(con, run_id)
        paged_verdicts = _paged("verdicts_page", pages.verdicts_page, counts["comparisons"],
                                f"the verdicts of run {run_id}")
        paged_published = _paged("published_page", pages.published_page,
                                 counts["published"], f"the published entries of run {run_id}")
        paged_blocked = _paged("blocked_page", pages.blocked_page, counts["block_rows"],
                               f"the blocked entries of run {run_id}")
        verdicts = read.comparisons(con, run_id, PAGE_ROWS, paged_verdicts.offset)
        published = read.published_entries(con, run_id, PAGE_ROWS, paged_published.offset)
        blocked = read.blocks(con, run_id, PAGE_ROWS, paged_blocked.offset)
    # each pager's links keep the other tables where they are
    here = {"warehouse": warehouse, "run": run_id, "verdicts_page": pages.verdicts_page,
            "published_page": pages.published_page, "blocked_page": pages.blocked_page}

    def pager(table_id: str, noun: str, paged: Paged) -> str:
        others = {k: v for k, v in here.items() if k != paged.param}
        return _pager(table_id, noun, paged, "run", **others)

    sweep = summary["sweep_name"]
    facts = [("sweep", _link("sweep", sweep, warehouse=warehouse, sweep=sweep)),
             ("started", _e(_text(summary["started_at"]))),
             ("ended", _e(_text(summary["ended_at"]))),
             ("evidence", _e(_text(summary["evidence"]))),
             ("sweep file sha256", f"<code>{_e(summary['sweep_sha256'])}</code>"),
             ("harness", _e(_text(summary["harness_version"])))]
    body = [_warehouse_note(warehouse),
            "<div class='scroll'><table id='run-facts'>"
            + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts)
            + "</table></div>",
            f"<h2>Verdicts ({counts['comparisons']:,})</h2>",
            "<p class='note'>Each A/B comparison of the sweep, judged against its A/A "
            "control where it has one; a verdict that cannot be decided says why.</p>",
            pager("verdicts", "verdicts", paged_verdicts),
            _verdicts_table(warehouse, verdicts),
            f"<h2>Published entries ({counts['published']:,})</h2>",
            pager("published", "entries", paged_published),
            _published_table(warehouse, published),
            f"<h2>Blocked entries ({counts['blocked']:,})</h2>",
            "<p class='note'>One row per blocked entry, failed rule and the subject it "
            "failed on (a restart, a window or the entry itself).</p>",
            pager("blocked", "rows", paged_blocked),
            _blocked_table(warehouse, blocked)]
    return _page(f"Run {run_id}", [_home_crumb(), _link("sweep", sweep, warehouse=warehouse,
                                                        sweep=sweep), _e(run_id)], body)


def entry_page(warehouse: Path, entry_id: str) -> HTMLResponse:
    with reading(warehouse) as con:
        entry = read.entry_summary(con, entry_id)
        if entry is None:
            raise HTTPException(404, f"no entry {entry_id!r} in {warehouse}")
        blocks = read.entry_blocks(con, entry_id)
        windows = read.entry_windows(con, entry_id)
        lineage = explain(con, entry_id)
    state = ("<p><span class='published'>published</span>: it passed every rule.</p>"
             if entry["publishable"] else
             "<p><span class='blocked'>blocked</span>: never published; the rules that "
             "stopped it are below.</p>")
    value = ("no value" if _missing(entry["value"]) else
             f"{_number(entry['value'])} {_interval(entry['ci95_low'], entry['ci95_high'])}")
    labels = ["arm", "workload", "load_point", "metric", "statistic", "scope", "numerator",
              "unit", "n_restarts", "n_requests", "evidence"]
    facts = ("<div class='scroll'><table id='entry-facts'>"
             f"<tr><th>value</th><td class='num'>{_e(value)}</td></tr>"
             + "".join(f"<tr><th>{_e(k.replace('_', ' '))}</th><td>{_e(_text(entry[k]))}"
                       "</td></tr>" for k in labels)
             + "</table></div>")
    body = [_warehouse_note(warehouse), state, facts]
    if len(blocks):
        body += ["<h2>Rules that blocked it</h2>",
                 _table("entry-blocks", ["rule", "subject", "expected", "found"],
                        [[(f"<span class='blocked'>{_e(b.rule)}</span>", ""),
                          (_e(b.subject), "wrap"), (_e(_text(b.expected)), "wrap"),
                          (_e(_text(b.found)), "wrap")] for b in blocks.itertuples()])]
    body += [f"<h2>Windows ({len(windows)})</h2>",
             _table("entry-windows", ["window", "arm", "restart", "restart status",
                                      "worker", "load point", "submitted", "completed",
                                      "failed", "unresolved", "drain", "attempt", "start"],
                    [[_t(w.window_id), _t(w.arm), _n(w.restart_index), _t(w.restart_status),
                      _t(w.worker_hostname), _t(w.load_point), _n(w.submitted),
                      _n(w.completed), _n(w.failed), _n(w.unresolved), _t(w.drain_status),
                      _n(w.attempt), _t(w.window_start)] for w in windows.itertuples()])
             if len(windows) else "<p class='note'>No window is behind it (no window "
                                  "passed every rule).</p>",
             "<h2>Lineage</h2><p class='note'>What <code>benchledger explain "
             f"{_e(entry_id)}</code> prints: its requests, raw files (sha256) and every "
             "expectation result behind it.</p>",
             f"<pre id='explain'>{_e(lineage)}</pre>"]
    run_id, sweep = entry["run_id"], entry["sweep_name"]
    crumbs = [_home_crumb(), _link("sweep", sweep, warehouse=warehouse, sweep=sweep),
              _link("run", run_id, warehouse=warehouse, run=run_id), _e(entry_id)]
    return _page(f"Entry {entry_id}", crumbs, body)


def _message_page(status: int, title: str, message: str) -> HTMLResponse:
    return _page(title, [_home_crumb()], [f"<div class='problem'>{_e(message)}</div>"],
                 status=status)


def create_app(warehouses: Warehouses, dependencies: Sequence[Any] = (),
               login_url: Callable[[Request], str] | None = None) -> FastAPI:
    """The pages, for mounting under any path. `warehouses` lists those a page may open
    (asked on every page: a sweep installed since appears at once); `dependencies` guard
    every page (the plugin's: Airflow's authentication); an unauthenticated visitor is
    sent to `login_url(request)` when given."""
    app = FastAPI(title="benchledger", docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=list(dependencies))

    def known(warehouse: str) -> Path:
        listed = warehouses()
        path = Path(warehouse).expanduser().resolve() if warehouse else None
        if path not in listed:
            raise HTTPException(404, f"{warehouse!r} is not a warehouse of this deployment "
                                     f"(known: {', '.join(map(str, listed)) or 'none'})")
        return path

    @app.exception_handler(Unreadable)
    def unreadable(_: Request, problem: Unreadable) -> HTMLResponse:
        return _page("Warehouse busy" if problem.busy else "Warehouse not readable",
                     [_home_crumb()], [_unreadable_html(problem)], status=503)

    @app.exception_handler(RequestValidationError)
    def invalid(_: Request, exc: RequestValidationError) -> HTMLResponse:
        # a page parameter that is not a page number: say which, as a page
        named = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or 'request'}: "
                          f"{e['msg']} (got {e.get('input')!r})" for e in exc.errors())
        return _message_page(422, "Refused", f"not a page of this app: {named}")

    @app.exception_handler(HTTPException)
    def refused(request: Request, exc: HTTPException) -> Response:
        if exc.status_code == 401 and login_url is not None:
            return RedirectResponse(login_url(request), status_code=303)
        return _message_page(exc.status_code, "Not found" if exc.status_code == 404
                             else "Refused", str(exc.detail))

    @app.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        return index_page(warehouses())

    def page_number() -> Any:  # one per parameter: FastAPI names a Query after its own
        return Query(1, ge=1, le=10**9)

    @app.get("/sweep", response_class=HTMLResponse)
    def sweep(warehouse: str, sweep: str, runs_page: int = page_number(),
              history_page: int = page_number()) -> HTMLResponse:
        return sweep_page(known(warehouse), sweep, runs_page, history_page)

    @app.get("/run", response_class=HTMLResponse)
    def run(warehouse: str, run: str, verdicts_page: int = page_number(),
            published_page: int = page_number(), blocked_page: int = page_number()
            ) -> HTMLResponse:
        return run_page(known(warehouse), run,
                        RunPages(verdicts_page, published_page, blocked_page))

    @app.get("/entry", response_class=HTMLResponse)
    def entry(warehouse: str, entry: str) -> HTMLResponse:
        return entry_page(known(warehouse), entry)

    return app

