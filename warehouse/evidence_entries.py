"""Entries of evidence from elsewhere: imported files and historical report rows.

Each entry keeps its evidence label (`imported`, `historical`, `derived_comparison`) and only
what its source says (T16): the labels the source does not carry stay NULL and are named
in `not_recorded`, so an export shows the gap. The same entry rules the pipeline's own
entries pass are run over them (the GX gate, suite "entries"), and every result is a row of
`validations`; a failed rule blocks the entry.

Imported windows are summarised like measured ones (queries/derive_request_stats.sql per
window, queries/imported_window_sums.sql for totals), but an import records no server
instance: there is no restart-level view, and n_restarts is NULL. A window that failed a
rule backs no value: its entries are written blocked, value NULL, as derive.py does.

Historical rows give their numbers as the report printed them: output_tok_s and
total_tok_s as two throughput entries with their numerators, ttft_s and tpot_s under the
statistic the report named (NULL when it named none). Nothing is derived from a rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb
import pandas as pd

from benchledger import __version__
from benchledger.imports.evidence import NOT_RECORDED
from benchledger.stats import t_bounds
from benchledger.warehouse.db import first_row, insert_frame, query_frame
from benchledger.warehouse.derive import NO_COUNTER, Block, entry_id, entry_key, gate_entries
from benchledger.warehouse.metrics import REQUEST_METRICS, WINDOW_METRICS

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
SERIES_KEY = ("profile", "evidence", "model", "runtime", "backend", "hardware")


@dataclass
class Candidate:
    """An entry before the entry rules ran, with what it rests on."""

    entry: dict
    lineage: list[tuple]  # (window_id, raw_file_sha256, request_metric)
    blocked: list[Block] = field(default_factory=list)
    validation_ids: list[str] = field(default_factory=list)


# --- imported files ----------------------------------------------------------------------


def derive_imported(con: duckdb.DuckDBPyConnection, run_id: str) -> int:
    """Write the entries of one imported run; returns how many were new."""
    run = _run(con, run_id)
    windows = query_frame(con, "run_windows", run_id=run_id).join(
        query_frame(con, "imported_window_sums", run_id=run_id).set_index("window_id"),
        on="window_id")
    validations = query_frame(con, "latest_validations", run_id=run_id)
    failed = validations[~validations["success"].astype(bool)]
    passing = windows[~windows["window_id"].isin(failed["subject"])]
    pooled = _request_stats(con, passing)
    candidates = []
    for window in windows.itertuples(index=False):
        w = pd.Series(window._asdict())
        blocks = [_block(r) for r in failed[failed["subject"] == w["window_id"]].itertuples()]
        labels = _imported_labels(run, w)
        made = _request_entries(w, pooled if not blocks else None)
        made += _window_entries(w, valued=not blocks)
        checked = validations.loc[validations["subject"] == w["window_id"], "validation_id"]
        for entry, request_metric in made:
            c = Candidate({**labels, **entry},
                          [(w["window_id"], w["requests_file_sha256"], request_metric)],
                          list(blocks), list(checked))
            _identify(c, run_id, pd.DataFrame({"window_id": [w["window_id"]],
                                               "requests_file_sha256": [
                                                   w["requests_file_sha256"]]}))
            candidates.append(c)
    return _finish(con, run_id, candidates)


def _run(con: duckdb.DuckDBPyConnection, run_id: str) -> dict:
    row = first_row(con, "SELECT sweep_name, source_tool, source_model FROM runs "
                         "WHERE run_id = ?", [run_id])
    if row is None:
        raise LookupError(f"run {run_id!r} is not in the warehouse")
    return {"name": row[0], "source_tool": row[1], "model": row[2]}


def _block(result) -> Block:
    return Block(result.expectation, str(result.subject), result.validation_id,
                 result.expected, result.found, result.observed)


def _request_stats(con: duckdb.DuckDBPyConnection, passing: pd.DataFrame) -> pd.DataFrame:
    """Per (window, metric column) over its completed measured requests: n, mean, sd,
    percentiles, min, max and the t-interval; each window is its own cell."""
    if passing.empty:
        return pd.DataFrame(index=pd.MultiIndex.from_tuples([], names=["cell",
                                                                       "metric_column"]))
    cells = pd.DataFrame({"window_id": passing["window_id"].astype(str),
                          "restart_id": passing["window_id"].astype(str),
                          "cell": passing["window_id"].astype(str)})
    con.register("derive_windows", cells)
    try:
        stats = query_frame(con, "derive_request_stats")
    finally:
        con.unregister("derive_windows")
    stats = stats[stats["restart_id"].isna()].copy()  # pooled: the whole window
    quantiles = pd.DataFrame(stats.pop("quantiles").tolist(), index=stats.index,
                             columns=["p50", "p90", "p99"])
    stats = pd.concat([stats, quantiles], axis=1)
    stats["ci95_low"], stats["ci95_high"] = t_bounds(stats["mean"], stats["sd"], stats["n"])
    return stats.set_index(["cell", "metric_column"])


def _imported_labels(run: dict, w: pd.Series) -> dict:
    closed_single = w["concurrency"] == 1 and w["arrival"] == "closed"
    troubled = w["completed"] != w["submitted"]
    labels = {
        "run_id": w["run_id"], "arm": run["name"], "workload": w["workload"],
        "concurrency": _int(w["concurrency"]), "model": run["model"],
        "max_tokens": _int(w["max_tokens"]), "temperature": _num(w["temperature"]),
        "arrival": _text(w["arrival"]), "requested_rate_rps": _num(w["requested_rate_rps"]),
        "n_submitted": int(w["submitted"]), "n_completed": int(w["completed"]),
        "n_failed": int(w["failed"]), "n_unresolved": int(w["unresolved"]),
        "drain_status": w["drain_status"],
        "mean_prompt_tokens": _num(w["mean_prompt_tokens"]),
        "mean_output_tokens": _num(w["mean_output_tokens"]),
        "mean_cached_tokens": _num(w["mean_cached_tokens"]),
        "token_source": _token_source(w["token_sources"]),
        "population": "completed_only" if troubled else "all_submitted",
        "scope": "single_stream" if closed_single else "per_user",
        "evidence": "imported", "source_tool": run["source_tool"],
        "harness_version": __version__, "counter_check": NO_COUNTER,
    }
    labels["not_recorded"] = _not_recorded(labels, IMPORTED_LABELS)
    return labels


def _token_source(sources) -> str | None:
    """The one source of a window's completed records; 'mixed (...)' when they differ;
    NULL when not recorded or no record completed."""
    if not isinstance(sources, str):
        return None
    parts = sources.split(", ")
    if len(parts) > 1:
        return f"mixed ({sources})"
    return None if parts[0] == NOT_RECORDED else parts[0]


def _request_entries(w: pd.Series,
                     pooled: pd.DataFrame | None) -> list[tuple[dict, str | None]]:
    """Per-request metrics over the window's completed requests (none when it failed a
    rule: then each entry is written with value NULL)."""
    out = []
    for spec in REQUEST_METRICS:
        key = (w["window_id"], spec.column)
        have = pooled is not None and key in pooled.index
        if getattr(spec, "optional", False) and not have:
            continue
        p = pooled.loc[key] if have else None
        base = {"metric": spec.metric, "unit": spec.unit, "phase": spec.phase,
                "numerator": spec.numerator, "denominator": spec.denominator,
                "n_requests": int(p["n"]) if have else 0, "n_restarts": None}
        mean = {**base, "statistic": "mean"}
        if have:
            mean.update(value=_num(p["mean"]), ci95_low=_num(p["ci95_low"]),
                        ci95_high=_num(p["ci95_high"]))
        out.append((mean, spec.column))
        for statistic in spec.extra:
            out.append(({**base, "statistic": statistic,
                         **({"value": _num(p[statistic])} if have else {})}, spec.column))
    return out


def _window_entries(w: pd.Series, valued: bool) -> list[tuple[dict, str | None]]:
    """Totals over the tool's own elapsed time (its denominator, in its words) and the
    outcome fractions of the window; one window, so no interval."""
    out = []
    for spec in WINDOW_METRICS:
        if spec.metric not in IMPORTED_WINDOW_METRICS:
            continue
        value = spec.value(w) if valued else None
        n = int(w["n_done"]) if spec.counts == "completed" else int(w["submitted"])
        denominator = w["denominator"] if spec.metric == "throughput" else spec.denominator
        out.append(({"metric": spec.metric, "unit": spec.unit, "phase": spec.phase,
                     "scope": "aggregate", "numerator": spec.numerator,
                     "denominator": denominator, "statistic": "mean",
                     "value": _num(value), "n_requests": n, "n_restarts": None,
                     **({"population": spec.population} if spec.population else {})},
                    None))
    return out


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
            value = _num(r[column])
            if value is None:
                continue  # the report printed no such number: no entry, nothing filled in
            statistic = _text(r[statistic_column]) if statistic_column else None
            entry = {**labels, "metric": metric, "unit": unit, "phase": phase,
                     "scope": "aggregate" if metric == "throughput" else _scope(r),
                     "numerator": numerator, "statistic": statistic, "value": value,
                     "denominator": _report_denominator(r) if numerator else None,
                     "warning": warnings.get(r["row_id"])}
            entry["not_recorded"] = _not_recorded(
                entry, HISTORICAL_LABELS + (("scope",) if entry["scope"] is None else ()),
                extra=("elapsed_s",) if numerator and _num(r["elapsed_s"]) is None else ())
            c = Candidate(entry, [(None, r["raw_file_sha256"], None)])
            _identify(c, run_id, pd.DataFrame({"window_id": [r["row_id"]],
                                               "requests_file_sha256": [r["raw_file_sha256"]]}),
                      r["row_id"])
            candidates.append(c)
    return _finish(con, run_id, candidates)


def _historical_labels(r: pd.Series) -> dict:
    counts = [_int(r[c]) for c in ("completed", "failed", "unresolved")]
    if None in counts:
        population = None  # not recorded
    else:
        population = "completed_only" if counts[1] + counts[2] else "all_submitted"
    return {
        "run_id": r["run_id"], "arm": _text(r["record_id"]) or f"line {r['line_no']}",
        "workload": _text(r["profile"]), "profile": _text(r["profile"]),
        "record_id": _text(r["record_id"]), "concurrency": _int(r["clients"]),
        "model": _text(r["model"]), "runtime": _text(r["runtime"]),
        "backend": _text(r["backend"]), "hardware": _text(r["hardware"]),
        "input_tokens_target": _int(r["input_tokens"]), "max_tokens": _int(r["output_target"]),
        "arrival": _text(r["arrival"]), "prompt_cache": _text(r["prompt_cache"]),
        "n_submitted": _int(r["requests"]), "n_completed": counts[0], "n_failed": counts[1],
        "n_unresolved": counts[2], "n_requests": counts[0], "n_restarts": None,
        "drain_status": _text(r["drain_status"]), "population": population,
        "evidence": r["evidence"], "source_tool": "report", "notes": _text(r["notes"]),
        "token_source": None, "harness_version": __version__,
    }


def _scope(r: pd.Series) -> str | None:
    clients = _int(r["clients"])
    if clients is None:
        return None  # single stream or per user: the report did not say
    return "single_stream" if clients == 1 and r["arrival"] == "closed" else "per_user"


def _report_denominator(r: pd.Series) -> str:
    elapsed = _num(r["elapsed_s"])
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


# --- shared: identify, gate, write --------------------------------------------------------


def _identify(c: Candidate, run_id: str, inputs: pd.DataFrame, *more: str) -> None:
    e = c.entry
    e["entry_key"] = entry_key(run_id, e["arm"], e["workload"], e["metric"], e["scope"],
                               e["concurrency"], e["statistic"], e["numerator"], *more)
    e["entry_id"] = entry_id(e["entry_key"], inputs, c.blocked)


def _finish(con: duckdb.DuckDBPyConnection, run_id: str, candidates: list[Candidate]) -> int:
    known = {r for r, in con.execute("SELECT entry_id FROM entries WHERE list_contains(?, "
                                     "entry_id)", [[c.entry["entry_id"] for c in candidates]]
                                     ).fetchall()}
    new = [c for c in candidates if c.entry["entry_id"] not in known]
    if not new:
        return 0
    # columns an evidence file may never record, NULL for the rules
    gate_entries(con, run_id, new, nullable=("value", "prompt_cache", "drain_status",
                                             "n_failed", "n_unresolved"))
    _write(con, new)
    return len(new)


def _write(con: duckdb.DuckDBPyConnection, new: list[Candidate]) -> None:
    insert_frame(con, "entries", pd.DataFrame([c.entry for c in new]))
    blocks = pd.DataFrame([(c.entry["entry_id"], b.rule, b.subject, b.validation_id,
                            b.expected, b.found) for c in new for b in c.blocked],
                          columns=["entry_id", "rule", "subject", "validation_id", "expected",
                                   "found"])
    insert_frame(con, "entry_blocks", blocks.drop_duplicates(["entry_id", "rule", "subject"]))
    lineage = [(c.entry["entry_id"], window, sha, None, metric)
               for c in new for window, sha, metric in c.lineage]
    lineage += [(c.entry["entry_id"], None, None, v, None)
                for c in new for v in c.validation_ids]
    insert_frame(con, "entry_lineage", pd.DataFrame(lineage, columns=[
        "entry_id", "window_id", "raw_file_sha256", "validation_id", "request_metric"]))


# --- values -------------------------------------------------------------------------------


def _not_recorded(entry: dict, labels: tuple[str, ...], extra: tuple[str, ...] = ()) -> str | None:
    missing = [label for label in labels if entry.get(label) is None] + list(extra)
    return ", ".join(missing) or None


def _num(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def _int(value) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


def _text(value) -> str | None:
    return None if value is None or (not isinstance(value, str) and pd.isna(value)) \
        else str(value)
