"""Making entries, for measured evidence (warehouse/derive.py) and imported evidence
(warehouse/evidence_entries.py) alike: each side decides what its cells are and makes its
candidates with the builders here; identifying, gating and writing them is done here once.

A candidate is an entry before the entry rules ran (expectations suite "entries"): its
labels and value, the windows it rests on, the failed rules that already block it and the
validations behind it. `record_entries` keeps those not stored yet (an entry id never
changes), gates them (every result is a row of `validations`; a failure blocks its entry)
and writes entries, entry_blocks, entry_lineage and entry_restart_means, one bulk insert
each.

Per-request metrics come from DuckDB (queries/derive_request_stats.sql over the windows
registered as `derive_windows`: per cell, metric and restart, and pooled per cell and
metric); Python sees only those summaries and applies the t quantiles to whole columns.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from benchledger.expectations.gate import run_entry_gate
from benchledger.imports.evidence import NOT_RECORDED
from benchledger.rules import BLOCK_STREAM_ENTRIES, ENERGY_METRICS, names_with_effect
from benchledger.rules.core import COMPLETED_ONLY
from benchledger.stats import t_bounds
from benchledger.warehouse.db import insert_frame, query_frame, query_sql
from benchledger.warehouse.metrics import (
    REQUEST_METRICS,
    STAMPED_WINDOW_METRICS,
    TIMING_COLUMNS,
    WINDOW_ELAPSED,
    WindowMetric,
)
from benchledger.warehouse.validate import store_results

Entry = dict[str, Any]
RestartRow = tuple[str, int, float, float | None]  # restart_id, n_requests, mean, sd
# Rules whose failure also blocks the window metrics resting on stream-event stamps.
STREAM_RULES = names_with_effect(BLOCK_STREAM_ENTRIES)


# --- values and labels --------------------------------------------------------------------


def as_float(value: Any) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def as_int(value: Any) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


def as_text(value: Any) -> str | None:
    return None if value is None or (not isinstance(value, str) and pd.isna(value)) \
        else str(value)


def scope(concurrency: Any, arrival: Any) -> str:
    """single_stream for one closed-loop user (no other request competes), else per_user."""
    return "single_stream" if concurrency == 1 and arrival == "closed" else "per_user"


def population(some_not_completed: bool) -> str:
    """completed_only where some submitted request did not complete (the values rest on
    the completed ones only), else all_submitted."""
    return COMPLETED_ONLY if some_not_completed else "all_submitted"


def token_source(window_sources: pd.Series) -> str | None:
    """The token source an entry rests on, from its windows' (derive_window_sums.sql
    token_sources: each a ', '-joined list): the one source, 'mixed (a, b)' when they
    differ (a rule blocks it), None when no completed request backs it or none recorded
    its source."""
    sources = sorted({source for joined in window_sources.dropna()
                      for source in str(joined).split(", ")})
    if not sources or sources == [NOT_RECORDED]:
        return None
    return sources[0] if len(sources) == 1 else f"mixed ({', '.join(sources)})"


# entries.speculation_source: where an entry's speculation came from (issue #23, item 2).
DECLARED = "declared"  # the sweep says its arm speculates (speculative, or the simulator's)
OBSERVED_COUNTERS = "observed: counters"  # the server's spec-decode counters moved
OBSERVED_CHUNKS = "observed: chunks"  # its streams carried several tokens per event


def speculation_source(declared: bool, observed: pd.Series) -> str | None:
    """Where the speculation of an entry's cell came from: declared by the sweep, else
    what any of its windows showed (the view window_speculation; counters before chunks),
    else None (neither declared nor observed)."""
    if declared:
        return DECLARED
    seen = set(observed.dropna())
    return next((source for source in (OBSERVED_COUNTERS, OBSERVED_CHUNKS) if source in seen),
                None)


def _pooled_mean(windows: pd.DataFrame, column: str) -> float | None:
    """The mean of `column` over the completed requests of these windows (from totals)."""
    count = windows[f"{column}_n"].sum() if len(windows) else 0
    return float(windows[f"{column}_sum"].sum() / count) if count else None


def _largest(windows: pd.DataFrame, column: str) -> float | None:
    """The largest value of column over the windows (None: none measured it, or windows
    from a source without the column)."""
    return as_float(windows[column].max()) if column in windows.columns and len(windows) \
        else None


def window_labels(windows: pd.DataFrame) -> Entry:
    """The labels that follow from the windows an entry describes, with their totals
    (derive_window_sums.sql): request counts, population, mean token counts, token source,
    and the ruler's error (T17): requests that arrived in a burst, the worst client lag p99
    and CPU share of the windows (NULL: not measured)."""
    return {
        "n_submitted": int(windows["submitted"].sum()),
        "n_completed": int(windows["completed"].sum()),
        "n_failed": int(windows["failed"].sum()),
        "n_unresolved": int(windows["unresolved"].sum()),
        "population": population(bool((windows["completed"] != windows["submitted"]).any())),
        "mean_prompt_tokens": _pooled_mean(windows, "prompt_tokens"),
        "mean_output_tokens": _pooled_mean(windows, "output_tokens"),
        "mean_cached_tokens": _pooled_mean(windows, "cached_tokens"),
        "token_source": token_source(windows["token_sources"]),
        "n_burst": int(windows["burst_requests"].sum()),
        "client_lag_p99_ms": _largest(windows, "client_lag_p99_ms"),
        "client_cpu_share": _largest(windows, "client_cpu_share"),
    }


# --- what an entry rests on ---------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """One failed rule behind an entry: a row of `entry_blocks`."""

    rule: str
    subject: str
    validation_id: str | None
    expected: str | None
    found: str | None
    observed: str

    @property
    def text(self) -> str:
        """This block as one part of entries.blocked_by."""
        return f"{self.rule} [{self.subject}]: {self.observed}"

    @classmethod
    def of(cls, result: Any) -> Block:
        """A failed validation (a row of latest_validations) as a Block."""
        return cls(result.expectation, str(result.subject), as_text(result.validation_id),
                   as_text(result.expected), as_text(result.found), result.observed)


@dataclass
class Candidate:
    """An entry before it is gated and written, with what it rests on."""

    entry: Entry
    request_metric: str | None = None  # lineage: which requests of its windows count (None: all)
    restart_rows: list[RestartRow] = field(default_factory=list)  # entry_restart_means rows
    # lineage: (window_id, raw_file_sha256) of what it rests on
    rests_on: list[tuple[str | None, str]] = field(default_factory=list)
    blocked: list[Block] = field(default_factory=list)
    validation_ids: list[str] = field(default_factory=list)


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:20]


def entry_key(run_id: str, *labels: Any) -> str:
    """What the entry is (run and labels): the same across re-derivations."""
    return _digest(run_id, *labels)


def entry_id(key: str, inputs: Iterable[tuple[Any, Any]], blocked: list[Block]) -> str:
    """Which derivation it is: the key plus the exact inputs behind the value (the windows
    and the sha256 of their requests files, which fix the requests) and the rules that
    blocked it. New data gives a new id; the old entry stays."""
    return _digest(key, sorted(inputs), sorted(block.text for block in blocked))


def identify(c: Candidate, run_id: str, inputs: Iterable[tuple[Any, Any]],
             *more: str) -> None:
    """Set the candidate's entry_key (its labels, and `more` where those do not tell two
    entries apart) and entry_id (the key, `inputs` and its blocks)."""
    e = c.entry
    # A rate ladder's rung is part of what the entry is (a concurrency's own point keeps
    # the key entries had before load points, so re-derived runs keep their keys).
    point = e.get("load_point")
    rung = (point,) if point and point != f"c{e['concurrency']}" else ()
    e["entry_key"] = entry_key(run_id, e["arm"], e["workload"], e["metric"], e["scope"],
                               e["concurrency"], e["statistic"], e["numerator"], *rung,
                               *more)
    e["entry_id"] = entry_id(e["entry_key"], inputs, c.blocked)


def settle(made: list[Candidate], run_id: str, labels: Entry, windows: pd.DataFrame,
           blocked: Sequence[Block], validation_ids: Iterable[str],
           timing_blocked: Sequence[Block] = (),
           energy_blocked: Sequence[Block] = ()) -> list[Candidate]:
    """The candidates of one cell, given its labels, the windows they rest on (window_id,
    requests_file_sha256), the failed rules that block them, those that block only its
    per-request timing entries (rules of effect block_timing_entries: the windows still
    back every other entry; of effect block_stream_entries, its stamped window metrics
    too), those that block only its energy entries (block_energy_entries) and the
    validations behind them; identified."""
    rests_on = list(zip(windows["window_id"], windows["requests_file_sha256"], strict=True))
    validation_ids = list(validation_ids)
    for c in made:
        c.entry = {**labels, **c.entry}
        stamped = c.request_metric is None and c.entry.get("metric") in STAMPED_WINDOW_METRICS
        timing = [b for b in timing_blocked if c.request_metric in TIMING_COLUMNS
                  or (stamped and b.rule in STREAM_RULES)]
        energy = energy_blocked if c.request_metric is None \
            and c.entry.get("metric") in ENERGY_METRICS else ()
        c.rests_on, c.blocked = rests_on, [*blocked, *timing, *energy]
        c.validation_ids = list(validation_ids)
        identify(c, run_id, rests_on)
    return made


# --- summaries from DuckDB ----------------------------------------------------------------


def _query_windows(con: duckdb.DuckDBPyConnection, windows: pd.DataFrame,
                   query: str) -> pd.DataFrame:
    """Run a query over `windows` (window_id, restart_id, cell) registered as derive_windows."""
    con.register("derive_windows", windows)
    try:
        return query_frame(con, query)
    finally:
        con.unregister("derive_windows")


def over_slo_requests(con: duckdb.DuckDBPyConnection, windows: pd.DataFrame, sql: str,
                      **relations: pd.DataFrame) -> pd.DataFrame:
    """Run a core query over `slo_requests` (benchledger/slo_judge.sql's relation: the
    measured requests of `windows`, registered as derive_windows) and `relations`."""
    for name, frame in {"derive_windows": windows, **relations}.items():
        con.register(name, frame)
    try:
        con.execute(query_sql("slo_requests"))
        return con.execute(sql).df()
    finally:
        con.execute("DROP VIEW IF EXISTS slo_requests")
        for name in ("derive_windows", *relations):
            con.unregister(name)


def window_totals(con: duckdb.DuckDBPyConnection, windows: pd.DataFrame) -> pd.DataFrame:
    """By window_id: the totals over each window's completed measured requests."""
    return _query_windows(con, windows, "derive_window_sums").set_index("window_id")


def request_stats(con: duckdb.DuckDBPyConnection, windows: pd.DataFrame
                  ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(pooled, per_restart): per (cell, metric column) and per (cell, metric column,
    restart) the count, mean, sd, percentiles, min and max, with t-interval bounds."""
    stats = _query_windows(con, windows, "derive_request_stats")
    quantiles = pd.DataFrame(stats.pop("quantiles").tolist(), index=stats.index,
                             columns=["p50", "p90", "p99"])
    stats = pd.concat([stats, quantiles], axis=1)
    stats["ci95_low"], stats["ci95_high"] = t_bounds(stats["mean"], stats["sd"], stats["n"])
    pooled = stats[stats["restart_id"].isna()].set_index(["cell", "metric_column"])
    per_restart = stats[stats["restart_id"].notna()].sort_values(
        ["cell", "metric_column", "restart_id"])
    return pooled, per_restart


@dataclass(frozen=True)
class RestartLevel:
    """Measured cells' second level: the server instances (restarts) behind their requests.
    per_restart: request_stats' rows per restart; summary, per (cell, metric column): each
    statistic's mean over restarts (<stat>_mean) with its t-interval (<stat>_low,
    <stat>_high), and restart_effect."""

    per_restart: pd.DataFrame
    summary: pd.DataFrame


# --- candidates of request and window metrics ---------------------------------------------


def cell_candidates(cell: Any, pooled: pd.DataFrame, restarts: RestartLevel | None,
                    windows: pd.DataFrame, specs: Iterable[WindowMetric],
                    counts: Mapping[str, int],
                    elapsed: str | None = WINDOW_ELAPSED) -> list[Candidate]:
    """The entries of one cell's request metrics (pooled over its requests from
    request_stats, and over its restarts where it has a restart level) and of its window
    metrics `specs` (over `windows`: those whose values count, with their totals). counts:
    n_requests by WindowMetric.counts; elapsed: how the source names a window's elapsed
    time (the denominator of per-elapsed metrics). An import's cell is one window and has
    no restart level: no interval over windows, and n_restarts is NULL."""
    return (_request_entries(cell, pooled, restarts)
            + _window_entries(windows, specs, counts, restarts is not None, elapsed))


def _request_entries(cell: Any, pooled: pd.DataFrame,
                     restarts: RestartLevel | None) -> list[Candidate]:
    """Entries over requests: means with two-level intervals, percentiles for latencies."""
    out = []
    for spec in REQUEST_METRICS:
        key = (cell, spec.column)
        have = key in pooled.index
        if spec.optional and not have:
            continue
        p = pooled.loc[key] if have else None
        rows = None if restarts is None else restarts.per_restart[
            (restarts.per_restart["cell"] == cell)
            & (restarts.per_restart["metric_column"] == spec.column)]
        r = restarts.summary.loc[key] if restarts is not None and have else None
        base: Entry = {"metric": spec.metric, "unit": spec.unit, "phase": spec.phase,
                       "numerator": spec.numerator, "denominator": spec.denominator,
                       "n_requests": int(p["n"]) if p is not None else 0,
                       "n_restarts": None if rows is None else len(rows)}
        mean: Entry = {**base, "statistic": "mean"}
        if p is not None:
            mean.update(value=as_float(p["mean"]), ci95_low=as_float(p["ci95_low"]),
                        ci95_high=as_float(p["ci95_high"]))
        if r is not None:
            mean.update(restart_mean=as_float(r["mean_mean"]),
                        restart_ci95_low=as_float(r["mean_low"]),
                        restart_ci95_high=as_float(r["mean_high"]),
                        restart_effect=bool(r["restart_effect"]))
        restart_rows: list[RestartRow] = [] if rows is None else [
            (x.restart_id, int(x.n), float(x.mean), as_float(x.sd)) for x in rows.itertuples()]
        out.append(Candidate(mean, spec.column, restart_rows))
        for statistic in spec.extra:
            extra: Entry = {**base, "statistic": statistic}
            # Pooled percentile/min/max (no interval is claimed); restart level: the
            # per-restart values' mean and t-interval.
            if p is not None:
                extra["value"] = as_float(p[statistic])
            if r is not None:
                extra.update(restart_mean=as_float(r[f"{statistic}_mean"]),
                             restart_ci95_low=as_float(r[f"{statistic}_low"]),
                             restart_ci95_high=as_float(r[f"{statistic}_high"]))
            out.append(Candidate(extra, spec.column))
    return out


def _window_entries(windows: pd.DataFrame, specs: Iterable[WindowMetric],
                    counts: Mapping[str, int], by_restart: bool,
                    elapsed: str | None) -> list[Candidate]:
    """Entries over windows (scope aggregate): one value per window, mean over windows.
    by_restart: each window is one restart's (measured), with entry_restart_means rows and
    the interval over them; else the one window's value (an import)."""
    # (records, not itertuples: column names such as slo_met:<name> stay as they are)
    rows = [pd.Series(w) for w in windows.to_dict("records")]
    out = []
    for spec in specs:
        values: dict[Any, float] = {}
        restart_rows: list[RestartRow] = []
        for w in rows:
            value = spec.value(w)
            if value is not None and not pd.isna(value):
                values[w["restart_id"]] = float(value)
                n = int(w["n_done"]) if spec.counts == "completed" else int(w["submitted"])
                restart_rows.append((w["restart_id"], n, float(value), None))
        if spec.optional and not values:
            continue
        entry: Entry = {"metric": spec.metric, "unit": spec.unit, "phase": spec.phase,
                        "scope": "aggregate", "numerator": spec.numerator,
                        "denominator": elapsed if spec.denominator == WINDOW_ELAPSED
                        else spec.denominator,
                        "statistic": "mean", "n_requests": counts[spec.counts]}
        if spec.population:
            entry["population"] = spec.population
        if by_restart:
            entry.update(n_restarts=len(values), **_over_windows(values.values()))
            out.append(Candidate(entry, restart_rows=restart_rows))
        else:
            entry.update(value=next(iter(values.values()), None), n_restarts=None)
            out.append(Candidate(entry))
    return out


def _over_windows(values: Iterable[float]) -> Entry:
    series = pd.Series(list(values), dtype=float)
    if series.empty:
        return {}
    bounds = t_bounds(series.mean(), series.std(ddof=1), len(series))
    mean, low, high = float(series.mean()), as_float(bounds[0]), as_float(bounds[1])
    # One window per restart: the window-level interval is the restart-level one.
    return {"value": mean, "ci95_low": low, "ci95_high": high,
            "restart_mean": mean, "restart_ci95_low": low, "restart_ci95_high": high}


# --- gate and write -----------------------------------------------------------------------


def record_entries(con: duckdb.DuckDBPyConnection, run_id: str, candidates: list[Candidate],
                   docs_dir: Path | None = None,
                   nullable: tuple[str, ...] = ("value",)) -> int:
    """Gate and write the candidates not stored yet (an entry id never changes); returns
    how many were new."""
    ids = [c.entry["entry_id"] for c in candidates]
    known = {row[0] for row in con.execute(
        "SELECT entry_id FROM entries WHERE list_contains(?, entry_id)", [ids]).fetchall()}
    new = [c for c in candidates if c.entry["entry_id"] not in known]
    if not new:
        return 0
    gate_entries(con, run_id, new, docs_dir, nullable)
    _write(con, new)
    return len(new)


def gate_entries(con: duckdb.DuckDBPyConnection, run_id: str, candidates: list[Candidate],
                 docs_dir: Path | None = None, nullable: tuple[str, ...] = ("value",)) -> None:
    """Run the entry rules over candidates; record every result; a failure blocks its
    entry, and each entry gets its verdict (publishable, blocked_by, derived_at). A
    `nullable` column no candidate carries is there as NULL for the rules (no cell had a
    validated window: every value NULL; a source that never records it)."""
    frame = pd.DataFrame([c.entry for c in candidates]).drop(columns=["entry_key"])
    for column in nullable:
        if column not in frame.columns:
            frame[column] = None
    results = run_entry_gate(frame, docs_dir=docs_dir)
    ids = store_results(con, run_id, results)
    by_entry = {c.entry["entry_id"]: c for c in candidates}
    for result, validation_id in zip(results, ids, strict=True):
        c = by_entry[result.subject]
        c.validation_ids.append(validation_id)
        if not result.success:
            c.blocked.append(Block(result.expectation, result.subject, validation_id,
                                   result.expected, result.found, result.observed))
    now = datetime.now(UTC)
    for c in candidates:
        c.entry.update(publishable=not c.blocked,
                       blocked_by="; ".join(block.text for block in c.blocked) or None,
                       derived_at=now)


def _write(con: duckdb.DuckDBPyConnection, new: list[Candidate]) -> None:
    """One bulk insert per table: entries, their blocks, lineage and restart means."""
    insert_frame(con, "entries", pd.DataFrame([c.entry for c in new]))
    blocks = pd.DataFrame([(c.entry["entry_id"], b.rule, b.subject, b.validation_id,
                            b.expected, b.found) for c in new for b in c.blocked],
                          columns=["entry_id", "rule", "subject", "validation_id", "expected",
                                   "found"])
    # One row per (entry, rule, subject): a subject's latest result only.
    insert_frame(con, "entry_blocks", blocks.drop_duplicates(["entry_id", "rule", "subject"]))
    # Lineage per window (what the entry rests on), never per request: the view
    # entry_requests expands a window to the requests `request_metric` selects.
    lineage: list[tuple[Any, ...]] = [
        (c.entry["entry_id"], window_id, sha256, None, c.request_metric)
        for c in new for window_id, sha256 in c.rests_on]
    lineage += [(c.entry["entry_id"], None, None, v, None)
                for c in new for v in c.validation_ids]
    insert_frame(con, "entry_lineage", pd.DataFrame(lineage, columns=[
        "entry_id", "window_id", "raw_file_sha256", "validation_id", "request_metric"]))
    means = [(c.entry["entry_id"], *row) for c in new for row in c.restart_rows]
    insert_frame(con, "entry_restart_means", pd.DataFrame(means, columns=[
        "entry_id", "restart_id", "n_requests", "mean", "sd"]))
