"""Derive entries from validated raw rows only (docs/protocol.md: definitions, warehouse
relations).

An entry is one labelled number for an (arm, workload, concurrency) cell: its phase
(prefill / decode / end_to_end), scope (single_stream / per_user / aggregate), numerator
and denominator, statistic, population, and the workload it describes. Its value comes
only from windows whose every rule passed. If a rule of its windows or restarts failed,
or an entry rule fails (expectations suite "entries"), the entry is still written, so the
failure is visible, but `publishable` is false and `blocked_by` names each failed rule
with what was expected and found.

Set-based, so a run of 10^6 requests derives in seconds: per-request metrics are summarised
by DuckDB in one query per run (queries/derive_request_stats.sql: per cell, metric and
restart, and pooled per cell and metric), window totals in another
(queries/derive_window_sums.sql); Python only sees those summaries (cells x metrics x
restarts rows), applies the t quantiles to whole columns at once, and writes every table
with one bulk insert. Lineage is stored per window (entry_lineage: the window, its raw
file and which of its requests count); the view entry_requests expands it to requests.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pandas as pd

from benchledger import __version__
from benchledger import rules as R
from benchledger.expectations.gate import run_entry_gate
from benchledger.rules import EXCLUDE_RESTART, names_with_effect
from benchledger.stats import t_bounds
from benchledger.sweep import ArmPlan, parse_sweep
from benchledger.warehouse.db import first_row, insert_frame, query_frame
from benchledger.warehouse.metrics import LOG_METRICS, REQUEST_METRICS, WINDOW_METRICS
from benchledger.warehouse.reconcile import COUNTERS
from benchledger.warehouse.validate import coverage_subject, store_results

# Rules whose failure leaves a restart out (its windows feed no entry) instead of
# blocking the entries: a throttled node is a fault of that instance, not of the arm.
EXCLUDING_RULES = names_with_effect(EXCLUDE_RESTART)
CHUNK_WARNING = "chunk counting would under-report output tokens by this factor (T1)"


def _digest(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:20]


def entry_key(run_id: str, *labels) -> str:
    """What the entry is (run and labels): the same across re-derivations."""
    return _digest(run_id, *labels)


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


def entry_id(key: str, windows: pd.DataFrame, blocked: list[Block]) -> str:
    """Which derivation it is: the key plus the exact inputs behind the value (the windows
    and the sha256 of their requests files, which fix the requests) and the rules that
    blocked it. New data gives a new id; the old entry stays."""
    inputs = sorted(zip(windows["window_id"], windows["requests_file_sha256"], strict=True))
    return _digest(key, inputs, sorted(block.text for block in blocked))


@dataclass
class RunFacts:
    """Everything derivation reads about one run, queried once (no request rows)."""

    sweep_toml: str
    restarts: pd.DataFrame
    windows: pd.DataFrame
    validations: pd.DataFrame
    counters: pd.DataFrame  # window_id, name, delta
    log_lines: pd.DataFrame  # window_id, generation_tok_s, prompt_tok_s, accepted_tok_s
    counter_checks: pd.DataFrame  # window_id, matched, lower_bound, mismatched, no_counter

    @classmethod
    def query(cls, con: duckdb.DuckDBPyConnection, run_id: str) -> RunFacts:
        row = first_row(con, "SELECT sweep_toml FROM runs WHERE run_id = ?", [run_id])
        if row is None:
            raise LookupError(f"run {run_id!r} is not in the warehouse")
        restarts = con.execute(
            "SELECT restart_id, arm, status, server_kind, server_version, "
            "effective_config_sha256 FROM restarts WHERE run_id = ?", [run_id]).df()

        def frame(name: str) -> pd.DataFrame:
            return query_frame(con, name, run_id=run_id)

        # The clock ratio the clock rule judged (NULL: no sample under load).
        clocks = frame("gate_restarts")[["restart_id", "clock_ratio"]]
        restarts = restarts.merge(clocks, on="restart_id", how="left")
        return cls(row[0], restarts, frame("run_windows"), frame("latest_validations"),
                   frame("counter_deltas_for_run"), frame("log_lines_for_run"),
                   frame("counter_checks_for_run"))


# entries.counter_check: how the server's own counters checked the token counts of the
# windows behind an entry (T3). Never blocking by itself (a server without /metrics can
# still be measured), but a number nobody cross-checked says so where it is read.
RECONCILED = "reconciled"  # every counter of every window matched the client's count
LOWER_BOUND = "lower bound"  # all checked, some only as a lower bound (failed/unresolved)
PARTIAL = "partial"  # some counters or windows had no counter to check against
NO_COUNTER = "no counter"  # no counter checked any of its windows
MISMATCH = "mismatch"  # a counter disagreed (its rule blocks the entry)


def token_source(window_sources: pd.Series) -> str | None:
    """The token source an entry rests on, from its windows' (derive_window_sums.sql
    token_sources: each a ', '-joined list): the one source, 'mixed (a, b)' when they
    differ (a rule blocks it), None when no completed request backs it."""
    sources = sorted({source for joined in window_sources.dropna()
                      for source in str(joined).split(", ")})
    if not sources:
        return None
    return sources[0] if len(sources) == 1 else f"mixed ({', '.join(sources)})"


def counter_check(window_ids: pd.Series, checks: pd.DataFrame) -> str | None:
    """The counter_check label of an entry resting on these windows (None: no window).
    checks: counter_checks_for_run.sql's rows; a window without rows was never reconciled,
    which counts as no counter for each of COUNTERS."""
    if not len(window_ids):
        return None
    mine = checks[checks["window_id"].isin(window_ids)]
    never = len(set(window_ids) - set(mine["window_id"])) * len(COUNTERS)
    matched, lower, mismatched = (int(mine[c].sum()) for c in
                                  ("matched", "lower_bound", "mismatched"))
    unchecked = int(mine["no_counter"].sum()) + never
    if mismatched:
        return MISMATCH
    if not matched + lower:
        return NO_COUNTER
    if unchecked:
        return PARTIAL
    return LOWER_BOUND if lower else RECONCILED


@dataclass
class Cell:
    """One (arm, workload, concurrency) of a run: its windows, what passed, what failed."""

    index: int
    run_id: str
    plan: ArmPlan
    workload: str
    concurrency: int
    passing: pd.DataFrame  # windows whose every rule passed, with their request totals
    failed_rules: pd.DataFrame  # latest failed validations of its restarts and windows
    rules: pd.DataFrame  # every latest validation of its restarts and windows
    restarts: pd.DataFrame
    excluded: pd.DataFrame  # failed EXCLUDING_RULES: restarts left out
    log_lines: pd.DataFrame  # the server log lines of the passing windows
    counter_checks: pd.DataFrame  # the run's counter_checks_for_run.sql rows

    @property
    def scope(self) -> str:
        closed_single = self.concurrency == 1 and self.plan.arrival == "closed"
        return "single_stream" if closed_single else "per_user"

    @property
    def population(self) -> str:
        troubled = (self.passing["completed"] != self.passing["submitted"]).any()
        return "completed_only" if troubled else "all_submitted"

    @property
    def n_done(self) -> int:
        """Completed measured requests of the passing windows."""
        return int(self.passing["n_done"].sum())

    def labels(self) -> dict:
        """The workload, state and provenance every entry of this cell carries."""
        w, arm = self.passing, self.plan.arm
        return {
            "run_id": self.run_id, "arm": arm.name, "workload": self.workload,
            "concurrency": self.concurrency, "model": arm.model, "server_kind": arm.server,
            "server_version": _single(self.restarts["server_version"]),
            "effective_config_sha256": _single(self.restarts["effective_config_sha256"]),
            "max_tokens": _single(w["max_tokens"]), "temperature": _single(w["temperature"]),
            "arrival": self.plan.arrival, "requested_rate_rps": self.plan.rate_rps,
            "achieved_rate_rps": _mean(w["achieved_rate_rps"]),
            "prompt_cache": _single(w["prompt_cache"]),
            "input_tokens_target": _single(w["input_tokens_target"]),
            "n_submitted": int(w["submitted"].sum()), "n_completed": int(w["completed"].sum()),
            "n_failed": int(w["failed"].sum()), "n_unresolved": int(w["unresolved"].sum()),
            "drain_status": ("incomplete" if (w["drain_status"] == "incomplete").any()
                             else "complete") if len(w) else None,
            "mean_prompt_tokens": _pooled_mean(w, "prompt_tokens"),
            "mean_output_tokens": _pooled_mean(w, "output_tokens"),
            "mean_cached_tokens": _pooled_mean(w, "cached_tokens"),
            "token_source": token_source(w["token_sources"]) if len(w) else None,
            "evidence": "rerun", "harness_version": __version__,
            "clock_check": self.clock_check(),
            "counter_check": counter_check(w["window_id"], self.counter_checks),
            "excluded": "; ".join(f"{r.subject}: {r.expectation}: {r.observed}"
                                  for r in self.excluded.itertuples()) or None,
        }

    def clock_check(self) -> str | None:
        """How the clocks behind this cell were checked (None: no rule ran)."""
        clock = self.rules[self.rules["expectation"] == R.CLOCK_UNDER_LOAD.name]
        used = clock[clock["subject"].isin(self.passing["restart_id"])]
        if used.empty:
            return None
        # A restart whose clock could not be read passed only because the sweep allowed
        # it (a required check fails and leaves the restart out).
        ratios = self.restarts.loc[self.restarts["restart_id"].isin(used["subject"]),
                                   "clock_ratio"]
        if ratios.isna().any():
            return "unchecked (require_clock_check = false)"
        return "checked"

    def blocked_by(self) -> list[Block]:
        return [_block(r) for r in self.failed_rules.itertuples()]


def _block(result) -> Block:
    """A failed validation (a row of latest_validations) as a Block."""
    def text(value) -> str | None:
        return None if value is None or (isinstance(value, float) and pd.isna(value)) \
            else str(value)

    return Block(result.expectation, str(result.subject), text(result.validation_id),
                 text(result.expected), text(result.found), result.observed)


def _cells(facts: RunFacts, run_id: str) -> list[Cell]:
    """Every planned cell, with the windows that passed every rule (before their totals)."""
    sweep = parse_sweep(facts.sweep_toml, source=f"runs[{run_id}].sweep_toml")
    v = facts.validations
    failed = v[~v["success"].astype(bool)]
    excluding = failed["expectation"].isin(EXCLUDING_RULES)
    failed_subjects = set(failed.loc[~excluding, "subject"])
    excluded_restarts = set(failed.loc[excluding, "subject"])
    cells = []
    for arm in sweep.arms:
        plan = sweep.plan(arm)
        restarts = facts.restarts[facts.restarts["arm"] == arm.name]
        for workload in sweep.workloads:
            for concurrency in plan.concurrency:
                windows = facts.windows[(facts.windows["arm"] == arm.name)
                                        & (facts.windows["workload"] == workload.name)
                                        & (facts.windows["concurrency"] == concurrency)]
                subjects = (set(restarts["restart_id"]) | set(windows["window_id"])
                            | {coverage_subject(run_id, arm.name, workload.name, concurrency)})
                passing = windows[~windows["window_id"].isin(failed_subjects)
                                  & ~windows["restart_id"].isin(failed_subjects)
                                  & ~windows["restart_id"].isin(excluded_restarts)]
                rules = v[v["subject"].isin(subjects)]
                bad = rules[~rules["success"].astype(bool)]
                out = bad["expectation"].isin(EXCLUDING_RULES)
                logs = facts.log_lines[facts.log_lines["window_id"].isin(passing["window_id"])]
                cells.append(Cell(len(cells), run_id, plan, workload.name, concurrency,
                                  passing, bad[~out], rules, restarts, bad[out], logs,
                                  facts.counter_checks))
    return cells


# --- summaries from DuckDB ---------------------------------------------------------------


def _derive_windows(cells: list[Cell]) -> pd.DataFrame:
    """The windows derivation uses, with their cell: registered for the two queries."""
    parts = [cell.passing[["window_id", "restart_id"]].assign(cell=cell.index)
             for cell in cells if len(cell.passing)]
    if not parts:
        return pd.DataFrame({"window_id": pd.Series(dtype=str),
                             "restart_id": pd.Series(dtype=str),
                             "cell": pd.Series(dtype="int64")})
    return pd.concat(parts, ignore_index=True)


def _with(con: duckdb.DuckDBPyConnection, frame: pd.DataFrame, query: str) -> pd.DataFrame:
    con.register("derive_windows", frame)
    try:
        return query_frame(con, query)
    finally:
        con.unregister("derive_windows")


STAT_COLUMNS = ("mean", "p50", "p90", "p99", "min", "max")


def _request_summaries(con: duckdb.DuckDBPyConnection, windows: pd.DataFrame
                       ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(pooled, per_restart): per (cell, metric column) and per (cell, metric column,
    restart) the count, mean, sd, percentiles, min and max, with t-interval bounds."""
    stats = _with(con, windows, "derive_request_stats")
    quantiles = pd.DataFrame(stats.pop("quantiles").tolist(), index=stats.index,
                             columns=["p50", "p90", "p99"])
    stats = pd.concat([stats, quantiles], axis=1)
    stats["ci95_low"], stats["ci95_high"] = t_bounds(stats["mean"], stats["sd"], stats["n"])
    pooled = stats[stats["restart_id"].isna()].set_index(["cell", "metric_column"])
    per_restart = stats[stats["restart_id"].notna()].sort_values(
        ["cell", "metric_column", "restart_id"])
    return pooled, per_restart


def _restart_level(per_restart: pd.DataFrame) -> pd.DataFrame:
    """Per (cell, metric column): each statistic's mean over restarts with its t-interval
    over restarts, and restart_effect (two restarts' request-level intervals apart)."""
    groups = per_restart.groupby(["cell", "metric_column"], sort=False)
    out = {}
    for stat in STAT_COLUMNS:
        mean, sd, n = (groups[stat].mean(), groups[stat].std(ddof=1), groups[stat].count())
        low, high = t_bounds(mean, sd, n)
        out.update({f"{stat}_mean": mean, f"{stat}_low": low, f"{stat}_high": high})
    # Restarts with one request have no interval and cannot be told apart (stats.Interval).
    effect = (groups["ci95_low"].max() > groups["ci95_high"].min()).astype(object)
    frame = pd.DataFrame(out)
    frame["restart_effect"] = effect
    frame["n_restarts"] = groups["restart_id"].count()
    return frame


def _window_totals(con: duckdb.DuckDBPyConnection, windows: pd.DataFrame) -> pd.DataFrame:
    return _with(con, windows, "derive_window_sums").set_index("window_id")


# --- entries -------------------------------------------------------------------------------


@dataclass
class Candidate:
    """An entry before it is gated and written, with what it rests on."""

    entry: dict
    cell: Cell
    request_metric: str | None  # lineage: which requests of its windows count (None: all)
    restart_rows: list[tuple] = field(default_factory=list)  # entry_restart_means rows
    blocked: list[Block] = field(default_factory=list)
    validation_ids: list[str] = field(default_factory=list)


def _value(x) -> float | None:
    return None if x is None or pd.isna(x) else float(x)


def _request_entries(cell: Cell, pooled: pd.DataFrame, per_restart: pd.DataFrame,
                     level: pd.DataFrame) -> list[Candidate]:
    """Entries over requests: means with two-level intervals, percentiles for latencies."""
    out = []
    for spec in REQUEST_METRICS:
        key = (cell.index, spec.column)
        have = key in pooled.index
        if spec.optional and not have:
            continue
        p = pooled.loc[key] if have else None
        rows = per_restart[(per_restart["cell"] == cell.index)
                           & (per_restart["metric_column"] == spec.column)]
        base = {"metric": spec.metric, "unit": spec.unit, "phase": spec.phase,
                "scope": cell.scope, "numerator": spec.numerator,
                "denominator": spec.denominator, "population": cell.population,
                "n_requests": int(p["n"]) if have else 0, "n_restarts": len(rows)}
        mean = {**base, "statistic": "mean"}
        if have:
            r = level.loc[key]
            mean.update(value=_value(p["mean"]), ci95_low=_value(p["ci95_low"]),
                        ci95_high=_value(p["ci95_high"]),
                        restart_mean=_value(r["mean_mean"]),
                        restart_ci95_low=_value(r["mean_low"]),
                        restart_ci95_high=_value(r["mean_high"]),
                        restart_effect=bool(r["restart_effect"]))
        if spec.metric == "tokens_per_chunk" and (mean.get("value") or 0) > 1.0:
            mean["warning"] = f"{CHUNK_WARNING}: x{mean['value']:.2f}"
        restart_rows = [(x.restart_id, int(x.n), float(x.mean), _value(x.sd))
                        for x in rows.itertuples()]
        out.append(Candidate(mean, cell, spec.column, restart_rows))
        for statistic in spec.extra:
            extra = {**base, "statistic": statistic}
            if have:
                r = level.loc[key]
                # Pooled percentile/min/max (no interval is claimed); restart level: the
                # per-restart values' mean and t-interval.
                extra.update(value=_value(p[statistic]),
                             restart_mean=_value(r[f"{statistic}_mean"]),
                             restart_ci95_low=_value(r[f"{statistic}_low"]),
                             restart_ci95_high=_value(r[f"{statistic}_high"]))
            out.append(Candidate(extra, cell, spec.column))
    return out


def _window_entries(cell: Cell, counters: dict) -> list[Candidate]:
    """Entries over windows (scope aggregate): one value per window, mean over windows."""
    out = []
    windows = [pd.Series({**w._asdict(), "counters": counters.get(w.window_id, {})})
               for w in cell.passing.itertuples(index=False)]
    for spec in WINDOW_METRICS:
        values, restart_rows = {}, []
        for w in windows:
            value = spec.value(w)
            if value is not None and not pd.isna(value):
                values[w["restart_id"]] = float(value)
                n = int(w["n_done"]) if spec.counts == "completed" else int(w["submitted"])
                restart_rows.append((w["restart_id"], n, float(value), None))
        if spec.optional and not values:
            continue
        n = cell.n_done if spec.counts == "completed" else int(cell.passing["submitted"].sum())
        entry = {"metric": spec.metric, "unit": spec.unit, "phase": spec.phase,
                 "scope": "aggregate", "numerator": spec.numerator,
                 "denominator": spec.denominator, "statistic": "mean",
                 "population": spec.population or cell.population,
                 "n_requests": n, "n_restarts": len(values), **_window_stats(values)}
        out.append(Candidate(entry, cell, None, restart_rows))
    return out


def _window_stats(values: dict[str, float]) -> dict:
    if not values:
        return {}
    series = pd.Series(list(values.values()), dtype=float)
    low, high = t_bounds(series.mean(), series.std(ddof=1), len(series))
    mean, low, high = float(series.mean()), _value(low), _value(high)
    # One window per restart: the window-level interval is the restart-level one.
    return {"value": mean, "ci95_low": low, "ci95_high": high,
            "restart_mean": mean, "restart_ci95_low": low, "restart_ci95_high": high}


def _log_entries(cell: Cell) -> list[Candidate]:
    """The server's own log lines, peak and mean, under their own names (T2)."""
    out = []
    for metric, column in LOG_METRICS:
        lines = cell.log_lines[cell.log_lines[column].notna()]
        if lines.empty:
            continue
        values = lines[column].astype(float)
        base = {"metric": metric, "unit": "tok/s", "phase": "end_to_end",
                "scope": "aggregate", "numerator": None,
                "denominator": f"the server's logging interval ({len(values)} log lines)",
                "population": "server_log_lines", "n_requests": cell.n_done,
                "n_restarts": lines["restart_id"].nunique()}
        out.append(Candidate({**base, "statistic": "server_log_peak",
                              "value": float(values.max())}, cell, None))
        out.append(Candidate({**base, "statistic": "server_log_mean",
                              "value": float(values.mean())}, cell, None))
    return out


def _candidates(con: duckdb.DuckDBPyConnection, facts: RunFacts,
                run_id: str) -> list[Candidate]:
    cells = _cells(facts, run_id)
    windows = _derive_windows(cells)
    totals = _window_totals(con, windows)
    pooled, per_restart = _request_summaries(con, windows)
    level = _restart_level(per_restart)
    counters = {wid: dict(zip(g["name"], g["delta"], strict=True))
                for wid, g in facts.counters.groupby("window_id")}
    candidates = []
    for cell in cells:
        cell.passing = cell.passing.join(totals, on="window_id")
        labels = cell.labels()
        blocked = cell.blocked_by()
        made = (_request_entries(cell, pooled, per_restart, level)
                + _window_entries(cell, counters) + _log_entries(cell))
        for c in made:
            c.entry = {**labels, **c.entry}
            c.entry["entry_key"] = entry_key(run_id, c.entry["arm"], c.entry["workload"],
                                             c.entry["metric"], c.entry["scope"],
                                             c.entry["concurrency"], c.entry["statistic"],
                                             c.entry["numerator"])
            c.blocked = list(blocked)
            c.entry["entry_id"] = entry_id(c.entry["entry_key"], cell.passing, c.blocked)
            c.validation_ids = list(cell.rules["validation_id"])
            candidates.append(c)
    return candidates


def derive_entries(con: duckdb.DuckDBPyConnection, run_id: str,
                   docs_dir: Path | None = None) -> int:
    """Write the run's entries and their lineage; returns how many were new. The entry
    rules' results join the run's GX Data Docs when docs_dir is given."""
    facts = RunFacts.query(con, run_id)
    candidates = _candidates(con, facts, run_id)
    known = _existing_entry_ids(con, [c.entry["entry_id"] for c in candidates])
    new = [c for c in candidates if c.entry["entry_id"] not in known]  # never changes
    if not new:
        return 0
    gate_entries(con, run_id, new, docs_dir)
    _write(con, new)
    return len(new)


def _existing_entry_ids(con: duckdb.DuckDBPyConnection, ids: list[str]) -> set[str]:
    rows = con.execute("SELECT entry_id FROM entries WHERE list_contains(?, entry_id)",
                       [ids]).fetchall()
    return {row[0] for row in rows}


def _write(con: duckdb.DuckDBPyConnection, new: list[Candidate]) -> None:
    """One bulk insert per table: entries, their blocks, lineage and restart means."""
    insert_frame(con, "entries", pd.DataFrame([c.entry for c in new]))
    blocks = [(c.entry["entry_id"], b.rule, b.subject, b.validation_id, b.expected, b.found)
              for c in new for b in c.blocked]
    if blocks:
        frame = pd.DataFrame(blocks, columns=["entry_id", "rule", "subject", "validation_id",
                                              "expected", "found"])
        # One row per (entry, rule, subject): a subject's latest result only.
        insert_frame(con, "entry_blocks",
                     frame.drop_duplicates(["entry_id", "rule", "subject"]))
    # Lineage per window (what the entry rests on), never per request: the view
    # entry_requests expands a window to the requests `request_metric` selects.
    lineage = [(c.entry["entry_id"], w.window_id, w.requests_file_sha256, None,
                c.request_metric)
               for c in new for w in c.cell.passing.itertuples()]
    lineage += [(c.entry["entry_id"], None, None, v, None)
                for c in new for v in c.validation_ids]
    if lineage:
        insert_frame(con, "entry_lineage", pd.DataFrame(lineage, columns=[
            "entry_id", "window_id", "raw_file_sha256", "validation_id", "request_metric"]))
    means = [(c.entry["entry_id"], *row) for c in new for row in c.restart_rows]
    if means:
        insert_frame(con, "entry_restart_means", pd.DataFrame(means, columns=[
            "entry_id", "restart_id", "n_requests", "mean", "sd"]))


def gate_entries(con: duckdb.DuckDBPyConnection, run_id: str, candidates: list,
                 docs_dir: Path | None = None, nullable: tuple[str, ...] = ("value",)) -> None:
    """Run the entry rules over candidates (anything with .entry, .blocked and
    .validation_ids: measured or imported); record every result; a failure blocks its
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


def _single(values: pd.Series):
    distinct = values.dropna().unique()
    if len(distinct) != 1:
        return None
    value = distinct[0]
    return value.item() if hasattr(value, "item") else value


def _mean(values: pd.Series) -> float | None:
    values = values.dropna()
    return float(values.mean()) if len(values) else None


def _pooled_mean(windows: pd.DataFrame, column: str) -> float | None:
    """The mean of `column` over the completed requests of these windows (from totals)."""
    count = windows[f"{column}_n"].sum() if len(windows) else 0
    return float(windows[f"{column}_sum"].sum() / count) if count else None
