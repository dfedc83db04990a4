"""Derive entries from validated raw rows only (docs/protocol.md: definitions, warehouse
relations).

An entry is one labelled number for an (arm, workload, concurrency) cell: its phase
(prefill / decode / end_to_end), scope (single_stream / per_user / aggregate), numerator
and denominator, statistic, population, and the workload it describes. Its value comes
only from windows whose every rule passed. If a rule of its windows or restarts failed,
or an entry rule fails (expectations suite "entries"), the entry is still written, so the
failure is visible, but `publishable` is false and `blocked_by` names each failed rule
with what was expected and found.

This module decides what a measured run's cells are (every planned arm, workload and
concurrency, with the windows that passed and the restarts left out), what they are
labelled and what their restart level is; warehouse/entries.py makes, gates and writes
the entries of the metrics in warehouse/metrics.py, as it does for imported evidence.

Set-based, so a run of 10^6 requests derives in seconds: per-request metrics are summarised
by DuckDB in one query per run (queries/derive_request_stats.sql: per cell, metric and
restart, and pooled per cell and metric), window totals in another
(queries/derive_window_sums.sql); Python only sees those summaries (cells x metrics x
restarts rows), applies the t quantiles to whole columns at once, and writes every table
with one bulk insert. Lineage is stored per window (entry_lineage: the window, its raw
file and which of its requests count); the view entry_requests expands it to requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from benchledger import __version__
from benchledger import rules as R
from benchledger.rules import (
    BLOCK_ENERGY_ENTRIES,
    BLOCK_STREAM_ENTRIES,
    BLOCK_TIMING_ENTRIES,
    ENERGY_METRICS,
    EXCLUDE_RESTART,
    names_with_effect,
)
from benchledger.rules.core import (
    COUNTER_UNREADABLE,
    LOWER_BOUND,
    MISMATCH,
    NO_COUNTER,
    PARTIAL,
    RECONCILED,
)
from benchledger.stats import t_bounds
from benchledger.sweep.slos import bounds_rows, judge_sql
from benchledger.sweep.spec import ArmPlan, LoadPoint, Sweep
from benchledger.warehouse.db import query_frame, recorded_sweep
from benchledger.warehouse.entries import (
    Block,
    Candidate,
    Entry,
    RestartLevel,
    cell_candidates,
    over_slo_requests,
    record_entries,
    request_stats,
    scope,
    settle,
    speculation_source,
    window_labels,
    window_totals,
)
from benchledger.warehouse.metrics import LOG_METRICS, WINDOW_METRICS, slo_window_metrics
from benchledger.warehouse.reconcile import COUNTERS
from benchledger.warehouse.validate import arm_points, coverage_subject

# Rules whose failure leaves a restart out (its windows feed no entry) instead of
# blocking the entries: a throttled node is a fault of that instance, not of the arm.
EXCLUDING_RULES = names_with_effect(EXCLUDE_RESTART)
# Rules whose failure blocks only the per-request timing entries of the subject's cell
# (T17: a late client misstamps each request; its window still backs throughput, counts
# and fractions, whose error is the lag over the window's length), and those that block
# its stamped window metrics with them (answers delivered whole in one read).
TIMING_RULES = names_with_effect(BLOCK_TIMING_ENTRIES) | names_with_effect(BLOCK_STREAM_ENTRIES)
# Rules whose failure blocks only the energy entries of the subject's cell (issue #39: a GPU
# page that lies; the window still backs every other entry, and has no energy itself).
ENERGY_RULES = names_with_effect(BLOCK_ENERGY_ENTRIES)
CHUNK_WARNING = "chunk counting would under-report output tokens by this factor (T1)"


@dataclass
class RunFacts:
    """Everything derivation reads about one run, queried once (no request rows)."""

    sweep: Sweep  # as the run recorded it (warehouse.db.recorded_sweep)
    restarts: pd.DataFrame
    windows: pd.DataFrame
    validations: pd.DataFrame
    counters: pd.DataFrame  # window_id, name, delta
    log_lines: pd.DataFrame  # window_id, generation_tok_s, prompt_tok_s, accepted_tok_s
    counter_checks: pd.DataFrame  # window_id, matched, lower_bound, mismatched, no_counter

    @classmethod
    def query(cls, con: duckdb.DuckDBPyConnection, run_id: str,
              sweep: Sweep | None = None) -> RunFacts:
        sweep = sweep or recorded_sweep(con, run_id)
        restarts = con.execute(
            "SELECT restart_id, arm, status, server_kind, server_version, "
            "effective_config_sha256 FROM restarts WHERE run_id = ?", [run_id]).df()

        def frame(name: str) -> pd.DataFrame:
            return query_frame(con, name, run_id=run_id)

        # The clock ratio the clock rule judged (NULL: no sample under load).
        clocks = frame("gate_restarts")[["restart_id", "clock_ratio"]]
        restarts = restarts.merge(clocks, on="restart_id", how="left")
        # What each window's evidence shows of speculation (entries.speculation_source).
        windows = frame("run_windows").merge(frame("speculation_for_run"), on="window_id",
                                             how="left")
        # The energy its deployment's GPUs drew (view window_energy), for energy entries.
        windows = windows.merge(frame("energy_for_run"), on="window_id", how="left")
        return cls(sweep, restarts, windows, frame("latest_validations"),
                   frame("counter_deltas_for_run"), frame("log_lines_for_run"),
                   frame("counter_checks_for_run"))


# entries.counter_check: how the server's own counters checked the token counts of the
# windows behind an entry (T3; its words: benchledger.rules.core). Never blocking by itself
# (a server without /metrics can still be measured), but a number nobody cross-checked says
# so where it is read.
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
    # (a frame without the column: rows from before counters could be unreadable)
    if "unreadable" in mine and int(mine["unreadable"].sum()):
        return COUNTER_UNREADABLE
    if not matched + lower:
        return NO_COUNTER
    if unchecked:
        return PARTIAL
    return LOWER_BOUND if lower else RECONCILED


@dataclass
class Cell:
    """One (arm, workload, load point) of a run: its windows, what passed, what failed."""

    index: int
    run_id: str
    plan: ArmPlan
    workload: str
    point: LoadPoint
    passing: pd.DataFrame  # windows whose every rule passed, with their request totals
    failed_rules: pd.DataFrame  # latest failed validations of its restarts and windows
    timing_rules: pd.DataFrame  # its failed TIMING_RULES: they block its timing entries only
    rules: pd.DataFrame  # every latest validation of its restarts and windows
    restarts: pd.DataFrame
    excluded: pd.DataFrame  # failed EXCLUDING_RULES: restarts left out
    log_lines: pd.DataFrame  # the server log lines of the passing windows
    counter_checks: pd.DataFrame  # the run's counter_checks_for_run.sql rows
    # where its speculation came from (entries.speculation_source), over all its windows:
    # observed speculation counts whether or not the window passed
    speculation: str | None = None
    # its failed ENERGY_RULES: they block its energy entries only
    energy_rules: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def n_done(self) -> int:
        """Completed measured requests of the passing windows."""
        return int(self.passing["n_done"].sum())

    def labels(self) -> Entry:
        """The workload, state and provenance every entry of this cell carries."""
        w, arm = self.passing, self.plan.arm
        return {
            "run_id": self.run_id, "arm": arm.name, "workload": self.workload,
            "concurrency": self.point.concurrency, "load_point": self.point.label,
            "scope": scope(self.point.concurrency, self.plan.arrival), **window_labels(w),
            "model": arm.model, "server_kind": arm.server,
            "server_version": _single(self.restarts["server_version"]),
            "effective_config_sha256": _single(self.restarts["effective_config_sha256"]),
            "max_tokens": _single(w["max_tokens"]), "temperature": _single(w["temperature"]),
            "arrival": self.plan.arrival,
            "requested_rate_rps": (self.point.rate_rps if self.point.rate_rps is not None
                                   else self.plan.single_rate_rps),
            "achieved_rate_rps": _mean(w["achieved_rate_rps"]),
            "prompt_cache": _single(w["prompt_cache"]),
            "input_tokens_target": _single(w["input_tokens_target"]),
            "drain_status": ("incomplete" if (w["drain_status"] == "incomplete").any()
                             else "complete") if len(w) else None,
            "evidence": "rerun", "harness_version": __version__,
            "max_burst_fraction": self.plan.max_burst_fraction,
            "clock_check": self.clock_check(),
            "counter_check": counter_check(w["window_id"], self.counter_checks),
            "speculation_source": self.speculation,
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
        return [Block.of(r) for r in self.failed_rules.itertuples()]

    def timing_blocked_by(self) -> list[Block]:
        return [Block.of(r) for r in self.timing_rules.itertuples()]

    def energy_blocked_by(self) -> list[Block]:
        return [Block.of(r) for r in self.energy_rules.itertuples()]


def _cells(facts: RunFacts, run_id: str) -> list[Cell]:
    """Every planned cell, with the windows that passed every rule (before their totals)."""
    sweep = facts.sweep
    v = facts.validations
    failed = v[~v["success"].astype(bool)]
    excluding = failed["expectation"].isin(EXCLUDING_RULES)
    # rules that block some entries only: their windows still pass
    narrow = failed["expectation"].isin(TIMING_RULES | ENERGY_RULES)
    failed_subjects = set(failed.loc[~excluding & ~narrow, "subject"])
    excluded_restarts = set(failed.loc[excluding, "subject"])
    cells: list[Cell] = []
    for arm in sweep.arms:
        plan = sweep.plan(arm)
        restarts = facts.restarts[facts.restarts["arm"] == arm.name]
        for workload in sweep.workloads:
            for point in arm_points(sweep, arm.name, workload.name, facts.windows):
                windows = facts.windows[(facts.windows["arm"] == arm.name)
                                        & (facts.windows["workload"] == workload.name)
                                        & (facts.windows["load_point"] == point.label)]
                subjects = (set(restarts["restart_id"]) | set(windows["window_id"])
                            | {coverage_subject(run_id, arm.name, workload.name, point)})
                passing = windows[~windows["window_id"].isin(failed_subjects)
                                  & ~windows["restart_id"].isin(failed_subjects)
                                  & ~windows["restart_id"].isin(excluded_restarts)]
                rules = v[v["subject"].isin(subjects)]
                bad = rules[~rules["success"].astype(bool)]
                out = bad["expectation"].isin(EXCLUDING_RULES)
                only_timing = bad["expectation"].isin(TIMING_RULES)
                only_energy = bad["expectation"].isin(ENERGY_RULES)
                logs = facts.log_lines[facts.log_lines["window_id"].isin(passing["window_id"])]
                cells.append(Cell(len(cells), run_id, plan, workload.name, point,
                                  passing, bad[~out & ~only_timing & ~only_energy],
                                  bad[only_timing], rules, restarts, bad[out], logs,
                                  facts.counter_checks,
                                  speculation_source(arm.is_speculative,
                                                     windows["speculation_observed"]),
                                  # those of the windows its entries rest on
                                  bad[only_energy
                                      & bad["subject"].isin(passing["window_id"])]))
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


STAT_COLUMNS = ("mean", "p50", "p90", "p99", "min", "max")


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


# --- entries -------------------------------------------------------------------------------


def _chunk_warning(candidates: list[Candidate]) -> None:
    """A mean tokens per chunk above 1: the factor by which chunk counting under-reports."""
    for c in candidates:
        e = c.entry
        if e["metric"] == "tokens_per_chunk" and e["statistic"] == "mean" \
                and (e.get("value") or 0) > 1.0:
            e["warning"] = f"{CHUNK_WARNING}: x{e['value']:.2f}"


def _energy_source(candidates: list[Candidate], windows: pd.DataFrame) -> None:
    """An energy entry says where its joules came from: the energy counters, power samples
    integrated (GPUs without a counter), or both across its windows (view window_energy).
    Windows without energy are not in its value; its n_restarts counts those that had."""
    kinds = set(windows["energy_source"].dropna()) if "energy_source" in windows else set()
    if not kinds:
        return
    parts = sorted({part for kind in kinds for part in str(kind).split(" + ")})
    label = " + ".join(parts)
    for c in candidates:
        if c.entry["metric"] in ENERGY_METRICS:
            c.entry["energy_source"] = label


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
                              "value": float(values.max())}))
        out.append(Candidate({**base, "statistic": "server_log_mean",
                              "value": float(values.mean())}))
    return out


def _slo_totals(con: duckdb.DuckDBPyConnection, sweep: Sweep, cells: list[Cell],
                windows: pd.DataFrame) -> pd.DataFrame:
    """By window_id: each SLO's met requests (`slo_met:<name>`), and over every SLO of the
    window's workload `slo_met_all` and `slo_met_output_tokens` (benchledger/slo_judge.sql);
    no columns when no cell has an SLO."""
    slos = pd.DataFrame([row for cell in cells
                         for row in bounds_rows(sweep.slos_of(cell.workload), cell.index)],
                        columns=["cell", "slo", "metric", "max_s"])
    if slos.empty or windows.empty:
        return pd.DataFrame(index=pd.Index([], name="window_id"))
    sums = over_slo_requests(con, windows, judge_sql(), slo_bounds=slos)
    wide = sums.pivot(index="window_id", columns="slo", values="met")
    wide.columns = ["slo_met_all" if c == "*" else f"slo_met:{c}" for c in wide.columns]
    tokens = sums[sums["slo"] == "*"].set_index("window_id")["met_output_tokens"]
    return wide.join(tokens.rename("slo_met_output_tokens"))


def _candidates(con: duckdb.DuckDBPyConnection, facts: RunFacts,
                run_id: str) -> list[Candidate]:
    cells = _cells(facts, run_id)
    windows = _derive_windows(cells)
    totals = window_totals(con, windows)
    slo_totals = _slo_totals(con, facts.sweep, cells, windows)
    if not slo_totals.empty:
        totals = totals.join(slo_totals)
    pooled, per_restart = request_stats(con, windows)
    restarts = RestartLevel(per_restart, _restart_level(per_restart))
    counters = {wid: dict(zip(g["name"], g["delta"], strict=True))
                for wid, g in facts.counters.groupby("window_id")}
    candidates = []
    for cell in cells:
        cell.passing = cell.passing.join(totals, on="window_id")
        valued = cell.passing.assign(counters=[counters.get(w, {})
                                               for w in cell.passing["window_id"]])
        counts = {"completed": cell.n_done, "submitted": int(cell.passing["submitted"].sum())}
        metrics = WINDOW_METRICS + slo_window_metrics(
            [slo.name for slo in facts.sweep.slos_of(cell.workload)])
        if len(cell.energy_rules):
            # a window's energy could not be read: its energy entries are made, blocked,
            # even where no window has energy (never simply left out, as where no
            # telemetry reports energy at all)
            metrics = tuple(replace(m, optional=False) if m.metric in ENERGY_METRICS else m
                            for m in metrics)
        made = cell_candidates(cell.index, pooled, restarts, valued, metrics, counts)
        _chunk_warning(made)
        _energy_source(made, cell.passing)
        made += _log_entries(cell)
        candidates += settle(made, run_id, cell.labels(), cell.passing, cell.blocked_by(),
                             cell.rules["validation_id"], cell.timing_blocked_by(),
                             cell.energy_blocked_by())
    return candidates


def derive_entries(con: duckdb.DuckDBPyConnection, run_id: str,
                   docs_dir: Path | None = None, sweep: Sweep | None = None) -> int:
    """Write the run's entries and their lineage; returns how many were new. The entry
    rules' results join the run's GX Data Docs when docs_dir is given. `sweep`: the run's
    recorded sweep, when the caller has parsed it already."""
    facts = RunFacts.query(con, run_id, sweep)
    return record_entries(con, run_id, _candidates(con, facts, run_id), docs_dir)


def _single(values: pd.Series) -> Any:
    distinct = values.dropna().unique()
    if len(distinct) != 1:
        return None
    value = distinct[0]
    return value.item() if hasattr(value, "item") else value


def _mean(values: pd.Series) -> float | None:
    values = values.dropna()
    return float(values.mean()) if len(values) else None
