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
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from benchledger.publishing import read
from benchledger.publishing.explain import explain
from benchledger.publishing.formatting import (
    missing,
    person_frame,
    person_unit,
    person_value,
    ui_interval,
    ui_number,
    ui_text,
)
from benchledger.publishing.history import UnknownSweep, history, history_chart_svg
from benchledger.publishing.templating import render
from benchledger.publishing.ui_paging import PAGE_ROWS, Link, Paged, Pager
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


# --- pages ------------------------------------------------------------------------------
# Each page is a template, templates/ui_*.html (autoescaped): the code below reads what it
# shows and hands the template values, never markup; numbers are formatted by its filters
# (publishing/formatting.py: ui_number, ui_text).


@dataclass(frozen=True)
class Cell:
    """One cell of a table: its value shown as text (`ui_text`) or as a number
    (`ui_number`, right-aligned), a link where `href` is given, and `mark`: "strong", or
    "blocked" (a rule that blocked an entry); `wrap` lets long text wrap."""

    value: Any
    number: bool = False
    href: str | None = None
    mark: str = ""
    wrap: bool = False


@dataclass(frozen=True)
class Row:
    cells: list[Cell]
    attrs: dict[str, str] = field(default_factory=dict)  # data-* of the row


@dataclass(frozen=True)
class Table:
    table_id: str
    headers: list[str]
    rows: list[Row]


def _t(value: Any, mark: str = "", wrap: bool = False) -> Cell:
    return Cell(value, mark=mark, wrap=wrap)


def _n(value: Any) -> Cell:
    return Cell(value, number=True)


def _link(page: str, text: Any, **params: Any) -> Cell:
    return Cell(text, href=_href(page, **params))


def _crumb(page: str, text: Any, **params: Any) -> Link:
    return Link(str(text), _href(page, **params))


HOME = Link("benchledger", "./")


def _page(template: str, title: str, crumbs: Sequence[Link | str], status: int = 200,
          **context: Any) -> HTMLResponse:
    return HTMLResponse(render(f"ui_{template}", title=title, crumbs=crumbs, **context),
                        status_code=status)


def _sweeps_table(warehouse: Path, frame: pd.DataFrame) -> Table | None:
    if frame.empty:
        return None
    return Table("sweeps", ["sweep", "runs", "newest run", "started", "published", "blocked",
                            "verdicts (newest run)"],
                 [Row([_link("sweep", r.sweep_name, warehouse=warehouse, sweep=r.sweep_name),
                       _n(r.runs),
                       _link("run", r.newest_run_id, warehouse=warehouse, run=r.newest_run_id),
                       _t(r.newest_started_at), _n(r.published), _n(r.blocked),
                       _t(r.verdicts)]) for r in frame.itertuples()])


def index_page(warehouses: list[Path]) -> HTMLResponse:
    found: list[tuple[Path, Table | None, Unreadable | None]] = []
    for warehouse in warehouses:
        try:
            with reading(warehouse) as con:
                found.append((warehouse, _sweeps_table(warehouse, read.sweeps(con)), None))
        except Unreadable as problem:
            found.append((warehouse, None, problem))
    return _page("index.html", "benchledger: sweeps and runs", ["benchledger"],
                 warehouses=found)


# matplotlib's pyplot is not thread-safe, and the API server makes pages in threads.
_DRAWING = threading.Lock()


def _history(warehouse: Path, sweep_name: str, frame: pd.DataFrame, history_page: int,
             runs_page: int) -> dict[str, Any]:
    """The sweep's headline entries across its runs: the chart of publishing/history.py
    (at most its MAX_PANELS panels) and one row per run and line, newest run first, each
    change judged against the sweep's A/A control, a latency in ms; the table a page at a
    time (a sweep scheduled every hour has thousands of runs)."""
    paged = _paged("history_page", history_page, len(frame),
                   f"the history of sweep {sweep_name!r}")
    if frame.empty:
        return {"history": None}
    with _DRAWING:
        chart = history_chart_svg(frame)
    shown = person_frame(frame.sort_values(
        ["started_at", "run_id", "arm", "workload", "metric", "statistic", "load_point"],
        ascending=[False, True, True, True, True, True, True]).iloc[
        paged.offset:paged.offset + PAGE_ROWS],
        ["value", "low", "high", "difference", "ci95_low", "ci95_high", "control_difference"])
    rows = [Row([_link("run", h.run_id, warehouse=warehouse, run=h.run_id), _t(h.kind),
                 _t(h.arm), _t(h.workload), _t(h.metric), _t(h.statistic), _t(h.load_point),
                 _t(f"{ui_number(h.value)} {ui_interval(h.low, h.high)}" if h.publishable
                    else "blocked"),
                 _t(h.unit), _t(h.change, mark="strong"), _n(h.difference),
                 _t(ui_interval(h.ci95_low, h.ci95_high)), _n(h.control_difference),
                 _t(h.config_change or None, wrap=True)])
            for h in shown.itertuples()]
    return {"history": Table("history", [
        "run", "kind", "arm", "workload", "metric", "statistic", "load point", "value [95%]",
        "unit", "change", "difference", "95% interval", "A/A difference",
        "configuration change"], rows),
        "chart": chart, "history_pager": _pager("history", "rows", paged, "sweep",
                                                warehouse=warehouse, sweep=sweep_name,
                                                runs_page=runs_page)}


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
    rows = [Row([_link("run", r.run_id, warehouse=warehouse, run=r.run_id), _t(r.started_at),
                 _t(r.ended_at),
                 _t("scheduled" if not missing(r.scheduled_for) else "manual"),
                 _t(r.evidence), _n(r.published), _n(r.blocked), _t(r.verdicts)])
            for r in runs.itertuples()]
    return _page(
        "sweep.html", f"Sweep {sweep_name}", [HOME, sweep_name], warehouse=warehouse,
        total=total, runs_pager=_pager("runs", "runs", paged, "sweep", warehouse=warehouse,
                                       sweep=sweep_name, history_page=history_page),
        runs=Table("runs", ["run", "started", "ended", "kind", "evidence", "published",
                            "blocked", "verdicts"], rows),
        **_history(warehouse, sweep_name, frame, history_page, runs_page))


def _entry_cell(warehouse: Path, entry_id: Any) -> Cell:
    return _t(None) if missing(entry_id) else _link("entry", entry_id, warehouse=warehouse,
                                                     entry=entry_id)


def _verdicts_table(warehouse: Path, frame: pd.DataFrame) -> Table:
    shown = person_frame(frame, ["a_mean", "b_mean", "difference", "ci95_low", "ci95_high",
                                 "control_difference"])
    rows = [Row([_t(c.role), _t(c.metric), _t(c.workload), _t(c.load_point), _t(c.a),
                 _t(c.b), _n(c.a_mean), _n(c.b_mean), _n(c.difference),
                 _t(ui_interval(c.ci95_low, c.ci95_high)), _n(c.control_difference),
                 _t(c.unit), _t(c.verdict, mark="strong"), _t(c.reason, wrap=True),
                 _entry_cell(warehouse, c.a_entry_id), _entry_cell(warehouse, c.b_entry_id)],
                {"data-comparison-id": str(c.comparison_id), "data-verdict": str(c.verdict)})
            for c in shown.itertuples()]
    return Table("verdicts", ["role", "metric", "workload", "load point", "a", "b", "a mean",
                              "b mean", "b - a", "95% interval", "A/A difference", "unit",
                              "verdict", "reason", "a entry", "b entry"], rows)


def _published_table(warehouse: Path, frame: pd.DataFrame) -> Table:
    shown = person_frame(frame, ["value", "ci95_low", "ci95_high"])
    rows = [Row([_link("entry", p.entry_id, warehouse=warehouse, entry=p.entry_id),
                 _t(p.arm), _t(p.workload), _t(p.load_point), _t(p.metric), _t(p.statistic),
                 _t(p.scope), _t(p.numerator), _n(p.value),
                 _t(ui_interval(p.ci95_low, p.ci95_high)), _t(p.unit), _n(p.n_restarts),
                 _n(p.n_requests)], {"data-entry-id": str(p.entry_id)})
            for p in shown.itertuples()]
    return Table("published", ["entry", "arm", "workload", "load point", "metric",
                               "statistic", "scope", "numerator", "value", "95% interval",
                               "unit", "restarts", "requests"], rows)


def _blocked_table(warehouse: Path, frame: pd.DataFrame) -> Table:
    rows = [Row([_link("entry", b.entry_id, warehouse=warehouse, entry=b.entry_id),
                 _t(b.arm), _t(b.workload), _t(b.concurrency), _t(b.metric),
                 _t(b.statistic), _t(b.rule, mark="blocked"), _t(b.subject, wrap=True),
                 _t(b.expected, wrap=True), _t(b.found, wrap=True)],
                {"data-entry-id": str(b.entry_id), "data-rule": ui_text(b.rule)})
            for b in frame.itertuples()]
    return Table("blocked", ["entry", "arm", "workload", "concurrency", "metric", "statistic",
                             "rule", "subject", "expected", "found"], rows)


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

    def pager(table_id: str, noun: str, paged: Paged) -> Pager | None:
        others = {k: v for k, v in here.items() if k != paged.param}
        return _pager(table_id, noun, paged, "run", **others)

    sweep = summary["sweep_name"]
    return _page(
        "run.html", f"Run {run_id}",
        [HOME, _crumb("sweep", sweep, warehouse=warehouse, sweep=sweep), run_id],
        warehouse=warehouse, summary=summary, counts=counts,
        sweep=_link("sweep", sweep, warehouse=warehouse, sweep=sweep),
        verdicts_pager=pager("verdicts", "verdicts", paged_verdicts),
        verdicts=None if verdicts.empty else _verdicts_table(warehouse, verdicts),
        published_pager=pager("published", "entries", paged_published),
        published=None if published.empty else _published_table(warehouse, published),
        blocked_pager=pager("blocked", "rows", paged_blocked),
        blocked=None if blocked.empty else _blocked_table(warehouse, blocked))


ENTRY_LABELS = ["arm", "workload", "load_point", "metric", "statistic", "scope", "numerator",
                "unit", "n_restarts", "n_requests", "evidence"]


def entry_page(warehouse: Path, entry_id: str) -> HTMLResponse:
    with reading(warehouse) as con:
        entry = read.entry_summary(con, entry_id)
        if entry is None:
            raise HTTPException(404, f"no entry {entry_id!r} in {warehouse}")
        blocks = read.entry_blocks(con, entry_id)
        windows = read.entry_windows(con, entry_id)
        lineage = explain(con, entry_id)
    unit = entry["unit"]
    low, high = (person_value(entry[k], unit) for k in ("ci95_low", "ci95_high"))
    value = ("no value" if missing(entry["value"]) else
             f"{ui_number(person_value(entry['value'], unit))} {ui_interval(low, high)}")
    labels = [(k.replace("_", " "), person_unit(entry[k]) if k == "unit" else entry[k])
              for k in ENTRY_LABELS]
    rules = Table("entry-blocks", ["rule", "subject", "expected", "found"], [
        Row([_t(b.rule, mark="blocked"), _t(b.subject, wrap=True), _t(b.expected, wrap=True),
             _t(b.found, wrap=True)]) for b in blocks.itertuples()])
    shown = Table("entry-windows", [
        "window", "arm", "restart", "restart status", "worker", "load point", "submitted",
        "completed", "failed", "unresolved", "drain", "attempt", "start"], [
        Row([_t(w.window_id), _t(w.arm), _n(w.restart_index), _t(w.restart_status),
             _t(w.worker_hostname), _t(w.load_point), _n(w.submitted), _n(w.completed),
             _n(w.failed), _n(w.unresolved), _t(w.drain_status), _n(w.attempt),
             _t(w.window_start)]) for w in windows.itertuples()])
    run_id, sweep = entry["run_id"], entry["sweep_name"]
    crumbs: list[Link | str] = [HOME, _crumb("sweep", sweep, warehouse=warehouse, sweep=sweep),
                                _crumb("run", run_id, warehouse=warehouse, run=run_id),
                                entry_id]
    return _page("entry.html", f"Entry {entry_id}", crumbs, warehouse=warehouse,
                 entry_id=entry_id, publishable=bool(entry["publishable"]), value=value,
                 labels=labels, rules=rules, windows=shown, lineage=lineage)


def _message_page(status: int, title: str, message: str) -> HTMLResponse:
    return _page("message.html", title, [HOME], status=status, message=message, problem=None)


def _unreadable_page(problem: Unreadable) -> HTMLResponse:
    return _page("message.html", "Warehouse busy" if problem.busy else "Warehouse not readable",
                 [HOME], status=503, problem=problem, message=problem.message)


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
        return _unreadable_page(problem)

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

