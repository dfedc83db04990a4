"""Entries of evidence from elsewhere: imported files and historical report rows.

Each entry keeps its evidence label (`imported`, `historical`, `derived_comparison`) and only
what its source says (T16): the labels the source does not carry stay NULL and are named
in `not_recorded`, so an export shows the gap. The same entry rules the pipeline's own
entries pass are run over them (the GX gate, suite "entries"), and every result is a row of
`validations`; a failed rule blocks the entry.

Imported windows are summarised like measured ones, by the same queries
(queries/derive_request_stats.sql, queries/derive_window_sums.sql) and into entries by the
same builders (warehouse/entries.py), each window its own cell; but an import records no
server instance: there is no restart-level view, and n_restarts is NULL. A window that
failed a rule backs no value: its entries are written blocked, value NULL, as derive.py
does.

Historical rows give their numbers as the report printed them: output_tok_s and
total_tok_s as two throughput entries with their numerators, ttft_s and tpot_s under the
statistic the report named (NULL when it named none). Nothing is derived from a rate.
"""

from __future__ import annotations

from typing import Any

import duckdb
import pandas as pd

from benchledger import __version__
from benchledger.imports.evidence import NOT_RECORDED
from benchledger.rules import DEFAULT_MAX_BURST_FRACTION
from benchledger.rules.core import NO_COUNTER
from benchledger.warehouse.db import first_row, query_frame
from benchledger.warehouse.derive import TIMING_RULES
from benchledger.warehouse.entries import (
    Block,
    Candidate,
    Entry,
    as_float,
    as_int,
    as_text,
    cell_candidates,
    identify,
    population,
    record_entries,
    request_stats,
    scope,
    settle,
    window_labels,
    window_totals,
)
from benchledger.warehouse.metrics import WINDOW_METRICS

# The window-level metrics an import supports: its totals over the tool's own elapsed time
# and its outcome fractions. The aggregate decode span and acceptance length need a shared
# clock and the server's counters, which imports do not have.
IMPORTED_WINDOW_METRICS = ("throughput", "completion_fraction", "success_fraction",
                           "success_rate")
# Labels an imported entry names in not_recorded when its source left them empty.
IMPORTED_LABELS = ("model", "concurrency", "arrival", "max_tokens", "temperature",
                   "prompt_cache", "token_source", "server_version",
                   "effective_config_sha256", "n_restarts")
HISTORICAL_LABELS = ("model", "runtime", "backend", "hardware", "input_tokens_target",
                     "max_tokens", "concurrency", "arrival", "prompt_cache", "n_submitted",
                     "n_completed", "n_failed", "n_unresolved", "drain_status", "population",
                     "statistic", "token_source", "n_restarts")
# The report's own columns, by the entry metric they become.
REPORT_METRICS = (
    # metric, column, unit, phase, numerator, statistic column
    ("throughput", "output_tok_s", "tok/s", "end_to_end", "output_tokens", None),
    ("throughput", "total_tok_s", "tok/s", "end_to_end", "input_plus_output_tokens", None),
    ("ttft", "ttft_s", "s", "prefill", None, "ttft_statistic"),
    ("tpot", "tpot_s", "s", "decode", None, "tpot_statistic"),
)
# Columns an evidence file may never record: NULL for the entry rules where no entry has one.
EVIDENCE_NULLABLE = ("value", "prompt_cache", "drain_status", "n_failed", "n_unresolved")
SERIES_KEY = ("profile", "evidence", "model", "runtime", "backend", "hardware")


# --- imported files ----------------------------------------------------------------------


def derive_imported(con: duckdb.DuckDBPyConnection, run_id: str) -> int:
    """Write the entries of one imported run; returns how many were new."""
    run = _run(con, run_id)
    windows = query_frame(con, "run_windows", run_id=run_id)
    # Each window is its own cell, and its own restart (an import records none).
    cells = pd.DataFrame({column: windows["window_id"].astype(str)
                          for column in ("window_id", "restart_id", "cell")})
    windows = windows.join(window_totals(con, cells), on="window_id")
    validations = query_frame(con, "latest_validations", run_id=run_id)
    failed = validations[~validations["success"].astype(bool)]
    # A timing rule's failure (T17) leaves its window backing every entry but the timing
    # ones; imports record no client lag, so it does not fail there today.
    timing = failed[failed["expectation"].isin(TIMING_RULES)]
    failed = failed[~failed["expectation"].isin(TIMING_RULES)]
    pooled, _ = request_stats(con, cells[~cells["window_id"].isin(failed["subject"])])
    specs = [spec for spec in WINDOW_METRICS if spec.metric in IMPORTED_WINDOW_METRICS]
    candidates = []
    for i, wid in enumerate(windows["window_id"]):
        window = windows.iloc[[i]]
        w = window.iloc[0]
        blocks = [Block.of(r) for r in failed[failed["subject"] == wid].itertuples()]
        counts = {"completed": int(w["n_done"]), "submitted": int(w["submitted"])}
        # Totals over the tool's own elapsed time (its denominator, in its words) and the
        # outcome fractions of the window; one window, so no interval.
        made = cell_candidates(wid, pooled, None, window.iloc[:0] if blocks else window,
                               specs, counts, elapsed=w["denominator"])
        checked = validations.loc[validations["subject"] == wid, "validation_id"]
        timing_blocks = [Block.of(r) for r in timing[timing["subject"] == wid].itertuples()]
        candidates += settle(made, run_id, _imported_labels(run, window), window, blocks,
                             checked, timing_blocks)
    return record_entries(con, run_id, candidates, nullable=EVIDENCE_NULLABLE)


def _run(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any]:
    row = first_row(con, "SELECT sweep_name, source_tool, source_model FROM runs "
                         "WHERE run_id = ?", [run_id])
    if row is None:
        raise LookupError(f"run {run_id!r} is not in the warehouse")
    return {"name": row[0], "source_tool": row[1], "model": row[2]}


def _imported_labels(run: dict[str, Any], window: pd.DataFrame) -> Entry:
    w = window.iloc[0]
    labels = {
        "run_id": w["run_id"], "arm": run["name"], "workload": w["workload"],
        "concurrency": as_int(w["concurrency"]), "model": run["model"],
        "max_tokens": as_int(w["max_tokens"]), "temperature": as_float(w["temperature"]),
        "arrival": as_text(w["arrival"]),
        "requested_rate_rps": as_float(w["requested_rate_rps"]),
        "drain_status": w["drain_status"], **window_labels(window),
        "scope": scope(w["concurrency"], w["arrival"]),
        "evidence": "imported", "source_tool": run["source_tool"],
        "harness_version": __version__, "counter_check": NO_COUNTER,
        # no sweep: its bursts are held to the protocol's default share
        "max_burst_fraction": DEFAULT_MAX_BURST_FRACTION,
    }
    labels["not_recorded"] = _not_recorded(labels, IMPORTED_LABELS)
    return labels


# --- historical report rows --------------------------------------------------------------


def derive_historical(con: duckdb.DuckDBPyConnection, run_id: str) -> int:
    """Write the entries of one imported report; returns how many were new."""
    rows = con.execute("SELECT * FROM report_rows WHERE run_id = ? ORDER BY line_no",
                       [run_id]).df()
    warnings = _series_warnings(con, run_id, rows)
    candidates = []
    for row in rows.itertuples(index=False):
        r = pd.Series(row._asdict())
        labels = _historical_labels(r)
        for metric, column, unit, phase, numerator, statistic_column in REPORT_METRICS:
            value = as_float(r[column])
            if value is None:
                continue  # the report printed no such number: no entry, nothing filled in
            statistic = as_text(r[statistic_column]) if statistic_column else None
            entry = {**labels, "metric": metric, "unit": unit, "phase": phase,
                     "scope": "aggregate" if metric == "throughput" else _scope(r),
                     "numerator": numerator, "statistic": statistic, "value": value,
                     "denominator": _report_denominator(r) if numerator else None,
                     "warning": warnings.get(r["row_id"])}
            entry["not_recorded"] = _not_recorded(
                entry, HISTORICAL_LABELS + (("scope",) if entry["scope"] is None else ()),
                extra=("elapsed_s",) if numerator and as_float(r["elapsed_s"]) is None else ())
            # lineage: the report file (no window); identity: the row of it
            c = Candidate(entry, rests_on=[(None, r["raw_file_sha256"])])
            identify(c, run_id, [(r["row_id"], r["raw_file_sha256"])], r["row_id"])
            candidates.append(c)
    return record_entries(con, run_id, candidates, nullable=EVIDENCE_NULLABLE)


def _historical_labels(r: pd.Series) -> Entry:
    completed, failed, unresolved = (as_int(r[c]) for c in ("completed", "failed",
                                                            "unresolved"))
    if completed is None or failed is None or unresolved is None:
        row_population = None  # not recorded
    else:
        row_population = population(bool(failed + unresolved))
    return {
        "run_id": r["run_id"], "arm": as_text(r["record_id"]) or f"line {r['line_no']}",
        "workload": as_text(r["profile"]), "profile": as_text(r["profile"]),
        "record_id": as_text(r["record_id"]), "concurrency": as_int(r["clients"]),
        "model": as_text(r["model"]), "runtime": as_text(r["runtime"]),
        "backend": as_text(r["backend"]), "hardware": as_text(r["hardware"]),
        "input_tokens_target": as_int(r["input_tokens"]), "max_tokens": as_int(r["output_target"]),
        "arrival": as_text(r["arrival"]), "prompt_cache": as_text(r["prompt_cache"]),
        "n_submitted": as_int(r["requests"]), "n_completed": completed, "n_failed": failed,
        "n_unresolved": unresolved, "n_requests": completed, "n_restarts": None,
        "drain_status": as_text(r["drain_status"]), "population": row_population,
        "evidence": r["evidence"], "source_tool": "report", "notes": as_text(r["notes"]),
        "token_source": None, "harness_version": __version__,
    }


def _scope(r: pd.Series) -> str | None:
    clients = as_int(r["clients"])
    if clients is None:
        return None  # single stream or per user: the report did not say
    return scope(clients, r["arrival"])


def _report_denominator(r: pd.Series) -> str:
    elapsed = as_float(r["elapsed_s"])
    if elapsed is None:
        return f"{NOT_RECORDED}: the report gives no elapsed time"
    return f"the report's elapsed_s ({elapsed:g} s)"


def _series_warnings(con: duckdb.DuckDBPyConnection, run_id: str,
                     rows: pd.DataFrame) -> dict[str, str]:
    """row_id -> the warning of its series, for series varying in more than one workload
    dimension (view report_series)."""
    series = con.execute("SELECT * FROM report_series WHERE run_id = ? "
                         "AND varying_dimensions > 1", [run_id]).df()
    if series.empty:
        return {}
    key = list(SERIES_KEY)
    flagged = rows[key + ["row_id"]].fillna("\0").merge(series.fillna("\0"), on=key)
    return {r.row_id: (f"series {r.profile!r} varies in {r.varying_dimensions} workload "
                       f"dimensions ({r.detail}): its points were never a controlled "
                       "experiment, so they do not show the effect of any one of them")
            for r in flagged.itertuples()}


# --- values -------------------------------------------------------------------------------


def _not_recorded(entry: Entry, labels: tuple[str, ...], extra: tuple[str, ...] = ()) -> str | None:
    missing = [label for label in labels if entry.get(label) is None] + list(extra)
    return ", ".join(missing) or None
