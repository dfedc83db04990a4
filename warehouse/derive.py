"""Derive entries from validated raw rows only (docs/protocol.md: definitions, warehouse relations).

An entry is one labelled number for an (arm, workload, concurrency) cell: its phase
(prefill / decode / end_to_end), scope (single_stream / per_user / aggregate), numerator
and denominator, statistic, population, and the workload it describes. Its value comes
only from windows whose every rule passed. If a rule of its windows or restarts failed,
or an entry rule fails (expectations suite "entries"), the entry is still written, so the
failure is visible, but `publishable` is false and `blocked_by` names each failed rule
with what was expected and found.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from benchledger import __version__
from benchledger import rules as R
from benchledger.expectations.gate import run_entry_gate
from benchledger.rules import EXCLUDE_RESTART, names_with_effect
from benchledger.stats import t_interval, two_level
from benchledger.sweep import ArmPlan, parse_sweep
from benchledger.warehouse.db import first_row, query_frame
from benchledger.warehouse.validate import coverage_subject, store_results

PERCENTILES = (50, 90, 99)
LATENCY_STATS = tuple(f"p{q}" for q in PERCENTILES)
# Rules whose failure leaves a restart out (its windows feed no entry) instead of
# blocking the entries: a throttled node is a fault of that instance, not of the arm.
EXCLUDING_RULES = names_with_effect(EXCLUDE_RESTART)


@dataclass(frozen=True)
class RequestMetric:
    """A per-request number (a column of the `requests` view), summarised over requests."""

    metric: str
    column: str
    unit: str
    phase: str  # prefill | decode | end_to_end (T7)
    numerator: str | None  # rates: output_tokens | prompt_tokens (T12); None for latencies
    denominator: str | None
    extra: tuple[str, ...] = ()  # statistics besides the mean: p50/p90/p99, min/max


REQUEST_METRICS = (
    RequestMetric("decode_rate", "decode_tok_s", "tok/s", "decode", "output_tokens",
                  "t_last - t_first of each request (its tokens after the first)"),
    RequestMetric("e2e_rate", "e2e_tok_s", "tok/s", "end_to_end", "output_tokens",
                  "t_done - t_submit of each request"),
    RequestMetric("prefill_rate", "prefill_tok_s", "tok/s", "prefill", "prompt_tokens",
                  "t_first - t_submit of each request (TTFT)"),
    RequestMetric("ttft", "ttft_s", "s", "prefill", None, None, LATENCY_STATS),
    RequestMetric("tpot", "tpot_s", "s", "decode", None, None, LATENCY_STATS),
    RequestMetric("e2e_latency", "e2e_s", "s", "end_to_end", None, None, LATENCY_STATS),
    # > 1 means each streamed event carried several tokens (speculative decoding): a
    # harness counting chunks would under-report by this factor (T1).
    RequestMetric("tokens_per_chunk", "tokens_per_chunk", "tokens/chunk", "decode", None,
                  "output_tokens / content-bearing stream events, per request",
                  ("min", "max")),
)
CHUNK_WARNING = "chunk counting would under-report output tokens by this factor (T1)"


def _output_throughput(window: pd.Series, done: pd.DataFrame) -> float | None:
    return done["output_tokens"].sum() / window["elapsed_s"] if window["elapsed_s"] else None


def _total_throughput(window: pd.Series, done: pd.DataFrame) -> float | None:
    tokens = (done["prompt_tokens"] + done["output_tokens"]).sum()
    return tokens / window["elapsed_s"] if window["elapsed_s"] else None


def _aggregate_decode(window: pd.Series, done: pd.DataFrame) -> float | None:
    """Tokens after each request's first, over the span in which the window decoded."""
    timed = done[done["t_first_ns"].notna() & done["t_last_ns"].notna()]
    span_s = (timed["t_last_ns"].max() - timed["t_first_ns"].min()) / 1e9 if len(timed) else 0
    return (timed["output_tokens"] - 1).sum() / span_s if span_s > 0 else None


def _acceptance_length(window: pd.Series, done: pd.DataFrame) -> float | None:
    """1 + accepted / drafts from the server's spec-decode counter deltas (vLLM's mean
    acceptance length); compare with the client's tokens per chunk."""
    counters = window["counters"]
    drafts = counters.get("vllm:spec_decode_num_drafts_total")
    accepted = counters.get("vllm:spec_decode_num_accepted_tokens_total")
    return 1 + accepted / drafts if drafts and accepted is not None else None


def _completion_fraction(window: pd.Series, done: pd.DataFrame) -> float | None:
    finished = window["completed"] + window["failed"]
    return finished / window["submitted"] if window["submitted"] else None


def _success_fraction(window: pd.Series, done: pd.DataFrame) -> float | None:
    return window["completed"] / window["submitted"] if window["submitted"] else None


def _success_rate_finished(window: pd.Series, done: pd.DataFrame) -> float | None:
    finished = window["completed"] + window["failed"]
    return window["completed"] / finished if finished else None


@dataclass(frozen=True)
class WindowMetric:
    """A per-window number (the unit is the window); entry value = mean over windows."""

    metric: str
    unit: str
    phase: str
    numerator: str
    denominator: str
    value: Callable[[pd.Series, pd.DataFrame], float | None]
    population: str | None = None  # None: 'all_submitted' or 'completed_only' by the data
    counts: str = "completed"  # n_requests counts completed or submitted requests
    optional: bool = False  # no entry at all where no window has a value (not applicable)


WINDOW_ELAPSED = "window elapsed_s: first measured submission to last completion or drain deadline"
WINDOW_METRICS = (
    WindowMetric("throughput", "tok/s", "end_to_end", "output_tokens", WINDOW_ELAPSED,
                 _output_throughput),
    WindowMetric("throughput", "tok/s", "end_to_end", "input_plus_output_tokens",
                 WINDOW_ELAPSED, _total_throughput),
    WindowMetric("decode_rate", "tok/s", "decode", "output_tokens",
                 "first t_first to last t_last in the window (each request's tokens after "
                 "its first)", _aggregate_decode),
    WindowMetric("completion_fraction", "fraction", "end_to_end", "finished_requests",
                 "submitted_requests", _completion_fraction, "all_submitted", "submitted"),
    WindowMetric("success_fraction", "fraction", "end_to_end", "completed_requests",
                 "submitted_requests", _success_fraction, "all_submitted", "submitted"),
    # "80 of 85 finished" is true only with its label; never an unlabelled 94% (T14).
    WindowMetric("success_rate", "fraction", "end_to_end", "completed_requests",
                 "finished_requests", _success_rate_finished, "finished_only", "submitted"),
    WindowMetric("mean_acceptance_length", "tokens/step", "decode",
                 "vllm:spec_decode_num_accepted_tokens_total delta",
                 "vllm:spec_decode_num_drafts_total delta (plus one token per step)",
                 _acceptance_length, optional=True),
)

# Server log lines (T2): each field under its own metric name, as peak and mean; never
# the delivered rate (the entry gate checks these names stay apart).
LOG_METRICS = (("server_log_generation_throughput", "generation_tok_s"),
               ("server_log_prompt_throughput", "prompt_tok_s"),
               ("server_log_accepted_throughput", "accepted_tok_s"))


def _digest(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:20]


def entry_key(run_id: str, *labels) -> str:
    """What the entry is (run and labels): the same across re-derivations."""
    return _digest(run_id, *labels)


def entry_id(key: str, used: pd.DataFrame, blocked: list[Block]) -> str:
    """Which derivation it is: the key plus the exact requests (and raw files) behind the
    value and the rules that blocked it. New data gives a new id; the old entry stays."""
    inputs = sorted(zip(used["request_id"], used["raw_file_sha256"], strict=True))
    return _digest(key, inputs, sorted(block.text for block in blocked))


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


@dataclass
class RunFacts:
    """Everything derivation reads about one run, queried once."""

    sweep_toml: str
    restarts: pd.DataFrame
    windows: pd.DataFrame
    requests: pd.DataFrame
    validations: pd.DataFrame
    counters: pd.DataFrame  # window_id, name, delta
    log_lines: pd.DataFrame  # window_id, generation_tok_s, prompt_tok_s, accepted_tok_s

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

        return cls(row[0], restarts, frame("run_windows"), frame("measured_requests"),
                   frame("latest_validations"), frame("counter_deltas_for_run"),
                   frame("log_lines_for_run"))


@dataclass
class Cell:
    """One (arm, workload, concurrency) of a run: its windows, what passed, what failed."""

    run_id: str
    plan: ArmPlan
    workload: str
    concurrency: int
    passing: pd.DataFrame  # windows whose every rule passed
    done: pd.DataFrame  # completed measured requests of the passing windows
    failed_rules: pd.DataFrame  # latest failed validations of its restarts and windows
    rules: pd.DataFrame  # every latest validation of its restarts and windows
    restarts: pd.DataFrame
    excluded: pd.DataFrame  # failed EXCLUDING_RULES: restarts left out
    counters: dict  # window_id -> {counter name: delta}
    log_lines: pd.DataFrame  # the server log lines of the passing windows

    @property
    def scope(self) -> str:
        closed_single = self.concurrency == 1 and self.plan.arrival == "closed"
        return "single_stream" if closed_single else "per_user"

    @property
    def population(self) -> str:
        troubled = (self.passing["completed"] != self.passing["submitted"]).any()
        return "completed_only" if troubled else "all_submitted"

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
            "mean_prompt_tokens": _mean(self.done["prompt_tokens"]),
            "mean_output_tokens": _mean(self.done["output_tokens"]),
            "mean_cached_tokens": _mean(self.done["cached_tokens"]),
            "evidence": "rerun", "harness_version": __version__,
            "clock_check": self.clock_check(),
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
    """A failed validation (a row of latest_validations or a RuleResult) as a Block."""
    def text(value) -> str | None:
        return None if value is None or (isinstance(value, float) and pd.isna(value)) \
            else str(value)

    return Block(result.expectation, str(result.subject),
                 text(getattr(result, "validation_id", None)), text(result.expected),
                 text(result.found), result.observed)


def _cells(facts: RunFacts, run_id: str):
    sweep = parse_sweep(facts.sweep_toml, source=f"runs[{run_id}].sweep_toml")
    v = facts.validations
    failed = v[~v["success"].astype(bool)]
    excluding = failed["expectation"].isin(EXCLUDING_RULES)
    failed_subjects = set(failed.loc[~excluding, "subject"])
    excluded_restarts = set(failed.loc[excluding, "subject"])
    counters = {wid: dict(zip(g["name"], g["delta"], strict=True))
                for wid, g in facts.counters.groupby("window_id")}
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
                requests = facts.requests
                done = requests[requests["window_id"].isin(passing["window_id"])
                                & (requests["status"] == "completed")]
                rules = v[v["subject"].isin(subjects)]
                bad = rules[~rules["success"].astype(bool)]
                out = bad["expectation"].isin(EXCLUDING_RULES)
                logs = facts.log_lines[facts.log_lines["window_id"].isin(passing["window_id"])]
                yield Cell(run_id, plan, workload.name, concurrency, passing, done,
                           bad[~out], rules, restarts, bad[out], counters, logs)


RestartRows = list[tuple[str, int, float, float | None]]  # (restart_id, n, mean, sd)


def _restart_rows(by_restart: dict[str, list[float]]) -> RestartRows:
    rows = []
    for restart_id, values in by_restart.items():
        sd = float(np.std(values, ddof=1)) if len(values) > 1 else None
        rows.append((restart_id, len(values), float(np.mean(values)), sd))
    return rows


def _request_entries(cell: Cell) -> list[tuple[dict, pd.DataFrame, RestartRows]]:
    """Entries over requests: means with two-level intervals, percentiles for latencies."""
    out = []
    for spec in REQUEST_METRICS:
        used = cell.done[cell.done[spec.column].notna()]
        by_restart = {rid: list(g[spec.column]) for rid, g in used.groupby("restart_id")}
        base = {"metric": spec.metric, "unit": spec.unit, "phase": spec.phase,
                "scope": cell.scope, "numerator": spec.numerator,
                "denominator": spec.denominator, "population": cell.population,
                "n_requests": len(used), "n_restarts": len(by_restart)}
        mean = {**base, "statistic": "mean", **_mean_stats(by_restart)}
        if spec.metric == "tokens_per_chunk" and (mean.get("value") or 0) > 1.0:
            mean["warning"] = f"{CHUNK_WARNING}: x{mean['value']:.2f}"
        out.append((mean, used, _restart_rows(by_restart)))
        for statistic in spec.extra:
            out.append(({**base, "statistic": statistic,
                         **_extra_stats(by_restart, statistic)}, used, []))
    return out


def _log_entries(cell: Cell) -> list[tuple[dict, pd.DataFrame, RestartRows]]:
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
                "population": "server_log_lines", "n_requests": len(cell.done),
                "n_restarts": lines["restart_id"].nunique()}
        out.append(({**base, "statistic": "server_log_peak", "value": float(values.max())},
                    cell.done, []))
        out.append(({**base, "statistic": "server_log_mean", "value": float(values.mean())},
                    cell.done, []))
    return out


def _window_entries(cell: Cell) -> list[tuple[dict, pd.DataFrame, RestartRows]]:
    """Entries over windows (scope aggregate): one value per window, mean over windows."""
    out = []
    for spec in WINDOW_METRICS:
        values, restart_rows = {}, []
        for window in cell.passing.itertuples(index=False):
            row = pd.Series({**window._asdict(),
                             "counters": cell.counters.get(window.window_id, {})})
            done = cell.done[cell.done["window_id"] == row["window_id"]]
            value = spec.value(row, done)
            if value is not None and not pd.isna(value):
                values[row["restart_id"]] = float(value)
                n = len(done) if spec.counts == "completed" else int(row["submitted"])
                restart_rows.append((row["restart_id"], n, float(value), None))
        if spec.optional and not values:
            continue
        n = (len(cell.done) if spec.counts == "completed"
             else int(cell.passing["submitted"].sum()))
        entry = {"metric": spec.metric, "unit": spec.unit, "phase": spec.phase,
                 "scope": "aggregate", "numerator": spec.numerator,
                 "denominator": spec.denominator, "statistic": "mean",
                 "population": spec.population or cell.population,
                 "n_requests": n, "n_restarts": len(values), **_window_stats(values)}
        out.append((entry, cell.done, restart_rows))
    return out


def _mean_stats(by_restart: dict[str, list[float]]) -> dict:
    if not by_restart:
        return {}
    stats = two_level(by_restart)
    return {"value": stats.requests.mean, "ci95_low": stats.requests.low,
            "ci95_high": stats.requests.high, "restart_mean": stats.restarts.mean,
            "restart_ci95_low": stats.restarts.low, "restart_ci95_high": stats.restarts.high,
            "restart_effect": stats.restart_effect}


STATISTICS = {f"p{q}": (lambda vs, q=q: float(np.percentile(vs, q))) for q in PERCENTILES}
STATISTICS.update(min=lambda vs: float(np.min(vs)), max=lambda vs: float(np.max(vs)))


def _extra_stats(by_restart: dict[str, list[float]], statistic: str) -> dict:
    """Pooled percentile/min/max (no interval is claimed); restart level: the per-restart
    values' mean and t-interval."""
    if not by_restart:
        return {}
    of = STATISTICS[statistic]
    pooled = [v for vs in by_restart.values() for v in vs]
    per_restart = t_interval([of(vs) for vs in by_restart.values()])
    return {"value": of(pooled), "restart_mean": per_restart.mean,
            "restart_ci95_low": per_restart.low, "restart_ci95_high": per_restart.high}


def _window_stats(values: dict[str, float]) -> dict:
    if not values:
        return {}
    iv = t_interval(list(values.values()))
    # One window per restart: the window-level interval is the restart-level one.
    return {"value": iv.mean, "ci95_low": iv.low, "ci95_high": iv.high,
            "restart_mean": iv.mean, "restart_ci95_low": iv.low, "restart_ci95_high": iv.high}


def derive_entries(con: duckdb.DuckDBPyConnection, run_id: str,
                   docs_dir: Path | None = None) -> int:
    """Write the run's entries and their lineage; returns how many were new. The entry
    rules' results join the run's GX Data Docs when docs_dir is given."""
    facts = RunFacts.query(con, run_id)
    candidates = []  # (entry, blocks, requests used, validations behind it, restart rows)
    for cell in _cells(facts, run_id):
        labels = cell.labels()
        computed = _request_entries(cell) + _window_entries(cell) + _log_entries(cell)
        for entry, used, restart_rows in computed:
            entry = {**labels, **entry}
            blocked = cell.blocked_by()
            entry["entry_key"] = entry_key(run_id, entry["arm"], entry["workload"],
                                           entry["metric"], entry["scope"],
                                           entry["concurrency"], entry["statistic"],
                                           entry["numerator"])
            entry["entry_id"] = entry_id(entry["entry_key"], used, blocked)
            candidates.append((entry, blocked, used, list(cell.rules["validation_id"]),
                               restart_rows))
    known = _existing_entry_ids(con, [entry["entry_id"] for entry, *_ in candidates])
    new = [c for c in candidates if c[0]["entry_id"] not in known]  # never silently changes
    if not new:
        return 0
    _gate_entries(con, run_id, new, docs_dir)
    now = datetime.now(UTC)
    blocks = []
    for entry, blocked, used, validation_ids, restart_rows in new:
        entry.update(publishable=not blocked,
                     blocked_by="; ".join(block.text for block in blocked) or None,
                     derived_at=now)
        columns = ", ".join(entry)
        con.execute(f"INSERT INTO entries ({columns}) VALUES ({', '.join('?' * len(entry))})",
                    list(entry.values()))
        blocks += [(entry["entry_id"], b.rule, b.subject, b.validation_id, b.expected, b.found)
                   for b in blocked]
        lineage = [(entry["entry_id"], r.request_id, r.raw_file_sha256, None)
                   for r in used.itertuples()]
        lineage += [(entry["entry_id"], None, None, v) for v in validation_ids]
        if lineage:
            con.executemany("INSERT INTO entry_lineage VALUES (?, ?, ?, ?)", lineage)
        if restart_rows:
            con.executemany("INSERT INTO entry_restart_means VALUES (?, ?, ?, ?, ?)",
                            [(entry["entry_id"], *row) for row in restart_rows])
    _insert_blocks(con, blocks)
    return len(new)


def _existing_entry_ids(con: duckdb.DuckDBPyConnection, ids: list[str]) -> set[str]:
    rows = con.execute("SELECT entry_id FROM entries WHERE list_contains(?, entry_id)",
                       [ids]).fetchall()
    return {row[0] for row in rows}


def _insert_blocks(con: duckdb.DuckDBPyConnection, blocks: list[tuple]) -> None:
    """One bulk insert of every (entry, failed rule, subject) of this derivation."""
    if not blocks:
        return
    frame = pd.DataFrame(blocks, columns=["entry_id", "rule", "subject", "validation_id",
                                          "expected", "found"])
    # One row per (entry, rule, subject): a subject's latest result only.
    frame = frame.drop_duplicates(["entry_id", "rule", "subject"])
    con.register("incoming_blocks", frame)
    try:
        con.execute("INSERT INTO entry_blocks BY NAME SELECT * FROM incoming_blocks")
    finally:
        con.unregister("incoming_blocks")


def _gate_entries(con: duckdb.DuckDBPyConnection, run_id: str, candidates: list,
                  docs_dir: Path | None) -> None:
    """Run the entry rules; record every result; a failure blocks its entry."""
    frame = pd.DataFrame([entry for entry, *_ in candidates]).drop(columns=["entry_key"])
    if "value" not in frame.columns:  # no cell had a validated window: every value NULL
        frame["value"] = None
    results = run_entry_gate(frame, docs_dir=docs_dir)
    ids = store_results(con, run_id, results)
    by_entry = {entry["entry_id"]: (blocked, validation_ids)
                for entry, blocked, _, validation_ids, _ in candidates}
    for result, validation_id in zip(results, ids, strict=True):
        blocked, validation_ids = by_entry[result.subject]
        validation_ids.append(validation_id)
        if not result.success:
            blocked.append(Block(result.expectation, result.subject, validation_id,
                                 result.expected, result.found, result.observed))


def _single(values: pd.Series):
    distinct = values.dropna().unique()
    if len(distinct) != 1:
        return None
    value = distinct[0]
    return value.item() if hasattr(value, "item") else value


def _mean(values: pd.Series) -> float | None:
    values = values.dropna()
    return float(values.mean()) if len(values) else None
