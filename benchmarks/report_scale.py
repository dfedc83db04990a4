"""report.html of a 10^6-request run: how long the publication takes to render, how large
the page is, and how long Chromium takes to load and paint it (issue #28: < 5 s, < 5 MB).

    .venv/bin/python benchmarks/report_scale.py --requests 1000000 --dir /tmp/report-scale

Builds the warehouse with benchmarks/warehouse_scale.py (its synthetic run, through load,
validate, derive and compare; a --dir that already holds that run is reused), then in this
process times each query the report runs and the whole publication (export_run into a
fresh folder: report.html, its charts and the other files), and measures report.html's
size. Then Debian's chromium (Playwright, a 1,400 x 900 window, a fresh page each time)
loads the page --loads times: the navigation's load event and first contentful paint from
the page's own Performance API, and the wall time of the navigation as the script saw it.

Prints one JSON line (see benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run as a script: make `benchmarks.` importable
    sys.path.insert(0, str(REPO))

MIB = 1024 * 1024
# The page's own account of its loading: navigation to load event, and first paints.
PAINT_TIMINGS = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const paint = Object.fromEntries(performance.getEntriesByType('paint')
                                   .map(p => [p.name, p.startTime]));
  return {load_event_ms: nav.loadEventEnd, dom_content_loaded_ms: nav.domContentLoadedEventEnd,
          first_paint_ms: paint['first-paint'] ?? null,
          first_contentful_paint_ms: paint['first-contentful-paint'] ?? null,
          elements: document.getElementsByTagName('*').length,
          script: document.documentElement.dataset.script ?? null};
}"""


def build_warehouse(base: Path, requests: int, slos: bool) -> dict:
    """The synthetic run through load .. compare (warehouse_scale.py, its JSON line)."""
    command = [sys.executable, str(REPO / "benchmarks" / "warehouse_scale.py"),
               "--requests", str(requests), "--dir", str(base), "--repeat", "1"]
    if slos:
        command.append("--slos")
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def query_seconds(warehouse: Path, run_id: str) -> dict[str, float]:
    """Each warehouse query the report runs, timed alone (seconds)."""
    from benchledger.publishing import read
    from benchledger.publishing.findings import speculation_finding_lines
    from benchledger.publishing.report_charts import DOTS_PER_RESTART
    from benchledger.publishing.report_workload import LENGTH_BINS, SAMPLES_PER_WORKLOAD
    from benchledger.warehouse.db import connect, query_frame

    calls = {
        "published_entries": lambda con: read.published_entries(con, run_id),
        "report_requests": lambda con: query_frame(con, "report_requests", run_id=run_id,
                                                   per_restart=DOTS_PER_RESTART),
        "comparisons": lambda con: read.comparisons(con, run_id),
        "frontier": lambda con: read.frontier(con, run_id),
        "frontier_findings": lambda con: read.frontier_findings(con, run_id),
        "delivered_vs_server": lambda con: read.delivered_vs_server(con, run_id),
        "speculation_findings": lambda con: speculation_finding_lines(con, run_id),
        "workload_samples": lambda con: read.workload_samples(con, run_id,
                                                              SAMPLES_PER_WORKLOAD),
        "workload_lengths": lambda con: read.workload_lengths(con, run_id, LENGTH_BINS),
        "blocks": lambda con: read.blocks(con, run_id),
        "rules_behind_blocked": lambda con: read.rules_behind_blocked(con, run_id),
        "ruler": lambda con: read.ruler(con, run_id),
        "run_provenance": lambda con: read.run_provenance(con, run_id),
        "arm_servers": lambda con: read.arm_servers(con, run_id),
        "raw_files": lambda con: read.raw_files(con, run_id),
    }
    timings = {}
    with connect(warehouse, read_only=True) as con:
        for name, call in calls.items():
            start = time.perf_counter()
            call(con)
            timings[name] = round(time.perf_counter() - start, 4)
    return timings


def publish(warehouse: Path, run_id: str, out: Path) -> dict:
    from benchledger.publishing.export import export_run
    from benchledger.warehouse.db import connect

    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    with connect(warehouse, read_only=True) as con:
        export_run(con, run_id, out)
    seconds = time.perf_counter() - start
    charts = sorted((out / "charts").glob("*.svg"))
    return {"seconds": round(seconds, 3),
            "report_bytes": (out / "report.html").stat().st_size,
            "report_mib": round((out / "report.html").stat().st_size / MIB, 3),
            "charts": len(charts), "chart_bytes": sum(p.stat().st_size for p in charts)}


def browser_load(report: Path, loads: int) -> dict:
    """Chromium loading the page `loads` times, a fresh page each time."""
    from playwright.sync_api import sync_playwright

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        raise SystemExit("no `chromium` on PATH: install Debian's chromium (`make browser`)")
    runs, errors = [], []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=binary, args=["--no-sandbox"])
        try:
            for _ in range(loads):
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.on("console", lambda m: errors.append(m.text) if m.type == "error"
                        else None)
                page.on("pageerror", lambda e: errors.append(str(e)))
                start = time.perf_counter()
                page.goto(report.as_uri(), wait_until="load")
                wall = time.perf_counter() - start
                timings = page.evaluate(PAINT_TIMINGS)
                runs.append({**timings, "goto_seconds": round(wall, 3)})
                page.close()
        finally:
            browser.close()
    return {"loads": runs, "errors": errors,
            "load_event_ms_median": statistics.median(r["load_event_ms"] for r in runs),
            "first_contentful_paint_ms_median": statistics.median(
                r["first_contentful_paint_ms"] for r in runs),
            "goto_seconds_max": max(r["goto_seconds"] for r in runs)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000,
                        help="measured requests of the synthetic run")
    parser.add_argument("--dir", type=Path, required=True,
                        help="where warehouse_scale.py keeps the run and its warehouse")
    parser.add_argument("--slos", action="store_true",
                        help="the run with two SLOs and a frontier comparison (goodput, "
                             "the frontier's charts)")
    parser.add_argument("--loads", type=int, default=3, help="page loads in Chromium")
    args = parser.parse_args(argv)

    from benchmarks.warehouse_scale import code_version, machine

    start = time.perf_counter()
    scale = build_warehouse(args.dir.resolve(), args.requests, args.slos)
    build_s = time.perf_counter() - start
    warehouse = Path(scale["warehouse"])
    run_id = _run_id(warehouse)
    queries = query_seconds(warehouse, run_id)
    published = publish(warehouse, run_id, args.dir.resolve() / "report-publication")
    browser = browser_load(args.dir.resolve() / "report-publication" / "report.html",
                           args.loads)
    print(json.dumps({
        "benchmark": "report_scale",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        **code_version(),
        "requests": scale["requests"], "slos": args.slos, "machine": machine(),
        "warehouse_build_seconds": round(build_s, 1),
        "entries": scale["rows"]["entries"], "comparisons": scale["rows"]["comparisons"],
        "report_queries_seconds": queries,
        "report_queries_seconds_total": round(sum(queries.values()), 3),
        "publication": published, "chromium": browser,
    }))
    return 0


def _run_id(warehouse: Path) -> str:
    from benchledger.publishing.read import latest_run_id
    from benchledger.warehouse.db import connect

    with connect(warehouse, read_only=True) as con:
        return latest_run_id(con)


if __name__ == "__main__":
    raise SystemExit(main())
