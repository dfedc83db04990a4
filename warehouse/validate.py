"""Run the GX gate over one run's rows and store every result in `validations`."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pandas as pd
from benchledger.expectations.gate import RuleResult, run_gate
from benchledger.warehouse.db import first_row, query_frame
from benchledger.warehouse.reconcile import reconcile_run

from benchledger.sweep import parse_sweep


def coverage_subject(run_id: str, arm: str, workload: str, concurrency: int) -> str:
    return f"{run_id}/{arm}/{workload}-c{concurrency}"


def coverage_results(run_id: str, sweep_toml: str, windows: pd.DataFrame) -> list[RuleResult]:
    """`windows_present`: every planned (arm, workload, concurrency) has one window per
    planned restart; a missing window (crashed task, failed restart) is never silent."""
    sweep = parse_sweep(sweep_toml, source=f"runs[{run_id}].sweep_toml")
    results = []
    for arm in sweep.arms:
        plan = sweep.plan(arm)
        for workload in sweep.workloads:
            for concurrency in plan.concurrency:
                found = int(((windows["arm"] == arm.name) & (windows["workload"] == workload.name)
                             & (windows["concurrency"] == concurrency)).sum())
                results.append(RuleResult(
                    suite="coverage",
                    subject=coverage_subject(run_id, arm.name, workload.name, concurrency),
                    expectation="windows_present", success=found == plan.restarts,
                    observed=f"expected {plan.restarts} window(s) (one per restart), "
                             f"found {found}"))
    return results


def validate_run(con: duckdb.DuckDBPyConnection, run_id: str,
                 docs_dir: Path | None = None) -> dict:
    """Run the gate over the run's rows and store every result; with docs_dir, also render
    the results as GX Data Docs there and remember where (runs.data_docs_path)."""
    row = first_row(con, "SELECT sweep_toml FROM runs WHERE run_id = ?", [run_id])
    if row is None:
        raise LookupError(f"run {run_id!r} is not in the warehouse")
    reconcile_run(con, run_id)  # the windows suite reads its results
    restarts = query_frame(con, "gate_restarts", run_id=run_id)
    windows = query_frame(con, "gate_windows", run_id=run_id)
    requests = query_frame(con, "measured_requests", run_id=run_id)
    results = (run_gate(restarts, windows, requests, docs_dir=docs_dir)
               + coverage_results(run_id, row[0], windows))
    store_results(con, run_id, results)
    if docs_dir is not None:
        con.execute("UPDATE runs SET data_docs_path = ? WHERE run_id = ?",
                    [str(docs_dir), run_id])
    failed = [f"{r.expectation} [{r.subject}]" for r in results if not r.success]
    return {"results": len(results), "failed": len(failed), "failed_rules": failed[:20]}


def store_results(con: duckdb.DuckDBPyConnection, run_id: str,
                  results: list[RuleResult]) -> list[str]:
    """Insert every rule result as a `validations` row; returns their ids, in order."""
    now = datetime.now(UTC)
    rows = [
        (hashlib.sha256(f"{run_id}|{r.suite}|{r.subject}|{r.expectation}|{now.isoformat()}"
                        .encode()).hexdigest()[:20],
         run_id, r.suite, r.subject, r.expectation, bool(r.success), r.observed, now)
        for r in results
    ]
    if rows:
        con.executemany("INSERT INTO validations VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    return [row[0] for row in rows]
