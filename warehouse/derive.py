"""Derive entries from validated raw rows only (PROTOCOL sections 2 and 5).

An entry is one labelled number for an (arm, workload, concurrency) cell. Its value comes
only from windows whose every rule passed; if any rule of its windows or restarts failed,
the entry is still written (so the failure is visible) but `publishable` is false and
`blocked_by` names each failed rule with what was expected and found.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb
import pandas as pd

from benchledger import __version__
from benchledger.stats import two_level
from benchledger.sweep import parse_sweep
from warehouse.db import first_row, query_sql


@dataclass(frozen=True)
class MetricSpec:
    metric: str
    column: str  # the per-request column of the `requests` view
    unit: str
    phase: str  # prefill | decode | end_to_end (T7)
    numerator: str | None  # output_tokens | input_plus_output_tokens (T12); None for latencies
    denominator: str | None


# Issue #2's entry set; every rate names its phase, numerator and denominator.
METRICS = (
    MetricSpec("decode_rate", "decode_tok_s", "tok/s", "decode", "output_tokens",
               "t_last - t_first (per request, first token excluded)"),
    MetricSpec("ttft", "ttft_s", "s", "prefill", None, None),
    MetricSpec("e2e_rate", "e2e_tok_s", "tok/s", "end_to_end", "output_tokens",
               "t_done - t_submit (per request)"),
)


def coverage_subject(run_id: str, arm: str, workload: str, concurrency: int) -> str:
    return f"{run_id}/{arm}/{workload}-c{concurrency}"


def entry_id(run_id: str, *labels) -> str:
    return hashlib.sha256(json.dumps([run_id, *labels]).encode()).hexdigest()[:20]


def _frame(con: duckdb.DuckDBPyConnection, name: str, run_id: str) -> pd.DataFrame:
    return con.execute(query_sql(name), {"run_id": run_id}).df()


@dataclass
class RunFacts:
    """Everything derivation reads about one run, queried once."""

    sweep_toml: str
    restarts: pd.DataFrame
    windows: pd.DataFrame
    requests: pd.DataFrame
    validations: pd.DataFrame

    @classmethod
    def query(cls, con: duckdb.DuckDBPyConnection, run_id: str) -> RunFacts:
        row = first_row(con, "SELECT sweep_toml FROM runs WHERE run_id = ?", [run_id])
        if row is None:
            raise LookupError(f"run {run_id!r} is not in the warehouse")
        restarts = con.execute(
            "SELECT restart_id, arm, status, server_kind, server_version, "
            "effective_config_sha256 FROM restarts WHERE run_id = ?", [run_id]).df()
        return cls(row[0], restarts, _frame(con, "gate_windows", run_id),
                   _frame(con, "measured_requests", run_id),
                   _frame(con, "latest_validations", run_id))

    def failed_rules(self, subjects: set[str]) -> pd.DataFrame:
        v = self.validations
        return v[v["subject"].isin(subjects) & ~v["success"].astype(bool)]

    def rules_for(self, subjects: set[str]) -> pd.DataFrame:
        return self.validations[self.validations["subject"].isin(subjects)]


def _blocked_by(failed: pd.DataFrame) -> list[str]:
    return [f"{r.expectation} [{r.subject}]: {r.observed}" for r in failed.itertuples()]


def _single(values: pd.Series):
    distinct = values.dropna().unique()
    return distinct[0] if len(distinct) == 1 else None


def derive_entries(con: duckdb.DuckDBPyConnection, run_id: str) -> int:
    """Write the run's entries and their lineage; returns how many were new."""
    facts = RunFacts.query(con, run_id)
    sweep = parse_sweep(facts.sweep_toml, source=f"runs[{run_id}].sweep_toml")
    now = datetime.now(UTC)
    written = 0
    for arm in sweep.arms:
        plan = sweep.plan(arm)
        arm_restarts = facts.restarts[facts.restarts["arm"] == arm.name]
        for workload in sweep.workloads:
            for concurrency in plan.concurrency:
                cell = facts.windows[(facts.windows["arm"] == arm.name)
                                     & (facts.windows["workload"] == workload.name)
                                     & (facts.windows["concurrency"] == concurrency)]
                subjects = (set(arm_restarts["restart_id"]) | set(cell["window_id"])
                            | {coverage_subject(run_id, arm.name, workload.name, concurrency)})
                failed = facts.failed_rules(subjects)
                bad = set(failed["subject"])
                passing = cell[~cell["window_id"].isin(bad) & ~cell["restart_id"].isin(bad)]
                rows = facts.requests[facts.requests["window_id"].isin(passing["window_id"])
                                      & (facts.requests["status"] == "completed")]
                context = {
                    "run_id": run_id, "arm": arm.name, "workload": workload.name,
                    "concurrency": concurrency, "model": arm.model,
                    "server_kind": arm.server,
                    "server_version": _single(arm_restarts["server_version"]),
                    "effective_config_sha256": _single(arm_restarts["effective_config_sha256"]),
                    "max_tokens": plan.max_tokens, "temperature": plan.temperature,
                    "population": ("all_measured"
                                   if (cell["completed"] == cell["submitted"]).all()
                                   else "completed_only"),
                    "derived_at": now,
                }
                for spec in METRICS:
                    written += _write_entry(con, facts, spec, context, rows,
                                            _blocked_by(failed), facts.rules_for(subjects))
    return written


def _write_entry(con, facts: RunFacts, spec: MetricSpec, context: dict, rows: pd.DataFrame,
                 blocked: list[str], rules: pd.DataFrame) -> int:
    concurrency = context["concurrency"]
    scope = "single_stream" if concurrency == 1 else "per_user"
    eid = entry_id(context["run_id"], context["arm"], context["workload"], spec.metric,
                   scope, concurrency, "mean", spec.numerator)
    if first_row(con, "SELECT count(*) FROM entries WHERE entry_id = ?", [eid])[0]:
        return 0  # an entry never silently changes value
    used = rows[rows[spec.column].notna()]
    by_restart = {rid: list(g[spec.column]) for rid, g in used.groupby("restart_id")}
    blocked = list(blocked)
    stats = two_level(by_restart) if by_restart else None
    if stats is None:
        blocked.append(f"no_validated_requests [{context['arm']}/{context['workload']}"
                       f"-c{concurrency}]: expected completed measured requests with a "
                       f"{spec.column} value in windows that passed every rule, found none")
    entry = {
        "entry_id": eid, "run_id": context["run_id"], "arm": context["arm"],
        "workload": context["workload"], "metric": spec.metric, "unit": spec.unit,
        "phase": spec.phase, "scope": scope, "concurrency": concurrency,
        "numerator": spec.numerator, "denominator": spec.denominator, "statistic": "mean",
        "value": stats.requests.mean if stats else None,
        "ci95_low": stats.requests.low if stats else None,
        "ci95_high": stats.requests.high if stats else None,
        "n_requests": len(used), "n_restarts": len(by_restart),
        "restart_mean": stats.restarts.mean if stats else None,
        "restart_ci95_low": stats.restarts.low if stats else None,
        "restart_ci95_high": stats.restarts.high if stats else None,
        "restart_effect": stats.restart_effect if stats else None,
        "population": context["population"], "evidence": "rerun",
        "publishable": not blocked, "blocked_by": "; ".join(blocked) or None,
        "model": context["model"], "server_kind": context["server_kind"],
        "server_version": context["server_version"],
        "effective_config_sha256": context["effective_config_sha256"],
        "max_tokens": context["max_tokens"],
        "mean_prompt_tokens": _mean(used["prompt_tokens"]),
        "mean_output_tokens": _mean(used["output_tokens"]),
        "temperature": context["temperature"], "harness_version": __version__,
        "derived_at": context["derived_at"],
    }
    columns = ", ".join(entry)
    con.execute(f"INSERT INTO entries ({columns}) VALUES ({', '.join('?' * len(entry))})",
                list(entry.values()))
    lineage = [(eid, r.request_id, r.raw_file_sha256, None) for r in used.itertuples()]
    lineage += [(eid, None, None, v) for v in rules["validation_id"]]
    if lineage:
        con.executemany("INSERT INTO entry_lineage VALUES (?, ?, ?, ?)", lineage)
    return 1


def _mean(values: pd.Series) -> float | None:
    values = values.dropna()
    return float(values.mean()) if len(values) else None
